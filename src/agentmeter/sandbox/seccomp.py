"""The local backend's seccomp filter: Docker's default profile, hand-assembled as classic BPF.

bubblewrap installs it (``bwrap --seccomp FD``) on every exec, agent and root alike, after it has
set up its namespaces and just before it runs the command, so bwrap itself may still mount and
unshare, and ``setpriv`` after it may still change uid (setresuid/setgroups/capset are allowed).
No library is needed: the program below is what libseccomp would compile from the same rules.

What it does, per syscall (``seccomp_data``: nr at 0, arch at 4, args[0] at 16):

- an architecture other than x86_64 or aarch64 (i386 via ``int 0x80``, arm32 compat), and the
  x32 ABI (nr with bit 30 set): the process is killed. Docker allows these ABIs with their own
  tables; we have no use for them, and a second ABI is a classic way around a filter.
- a syscall number above the newest one this table knows (450, set_mempolicy_home_node):
  ``ENOSYS``, as runc does, so a libc probing a newer call (fchmodat2, listmount, ...) falls back.
- ``clone3``: ``ENOSYS``, as Docker does: its flags live in memory a filter cannot read, so libc
  must fall back to ``clone``, whose flags it can.
- ``clone`` with any of CLONE_NEWNS/NEWCGROUP/NEWUTS/NEWIPC/NEWUSER/NEWPID/NEWNET (mask
  0x7E020000 on args[0]): ``EPERM``; plain fork/thread creation passes.
- ``socket(AF_VSOCK, ...)``: ``EPERM`` (Docker: the host's vsock is not the container's).
- ``personality`` with anything but 0, PER_LINUX32 (8), UNAME26 (0x20000), 0x20008 or the
  query 0xffffffff: ``EPERM`` (others, e.g. READ_IMPLIES_EXEC or ADDR_NO_RANDOMIZE, weaken ASLR
  and exploit mitigations).
- the syscalls below: ``EPERM``. Docker allows each only to a container granted the named
  capability, which ours never have (root execs keep Docker's default capability set minus a
  few; in a user namespace root holds every capability *of that namespace*, which is exactly
  why the filter, not the capability check, must say no):

  ============================================================  ===================================
  syscalls                                                      Docker's reason (capability)
  ============================================================  ===================================
  mount umount2 pivot_root open_tree move_mount fsopen fsconfig  mounting (CAP_SYS_ADMIN)
  fsmount fspick mount_setattr
  unshare setns                                                 new or foreign namespaces, incl.
                                                                nested user namespaces (SYS_ADMIN)
  bpf                                                           eBPF programs (SYS_ADMIN/CAP_BPF)
  perf_event_open                                               kernel profiling, info leaks
                                                                (SYS_ADMIN/CAP_PERFMON)
  fanotify_init lookup_dcookie quotactl quotactl_fd             host-wide fs events, kernel
  sethostname setdomainname syslog                              state (SYS_ADMIN, CAP_SYSLOG)
  io_uring_setup io_uring_enter io_uring_register               a large share of recent kernel
                                                                exploits; Docker denies it since
                                                                25.0 (earlier profiles allowed it)
  keyctl add_key request_key                                    the kernel keyring is not
                                                                namespaced: keys would be shared
                                                                with the host and other trials
  userfaultfd                                                   stalls kernel page faults: a
                                                                favourite exploit primitive
  kexec_load kexec_file_load reboot                             replace/stop the kernel (SYS_BOOT)
  init_module finit_module delete_module create_module          kernel modules (SYS_MODULE)
  get_kernel_syms query_module
  acct                                                          process accounting (SYS_PACCT)
  swapon swapoff                                                host swap (SYS_ADMIN)
  settimeofday clock_settime                                    the host clock (SYS_TIME)
  iopl ioperm                                                   raw I/O ports (SYS_RAWIO)
  vhangup                                                       terminals (SYS_TTY_CONFIG)
  open_by_handle_at                                             bypasses the mount namespace: the
                                                                "shocker" escape (DAC_READ_SEARCH)
  kcmp pidfd_getfd process_madvise                              other processes' internals
                                                                (SYS_PTRACE)
  mbind set_mempolicy get_mempolicy migrate_pages move_pages    NUMA placement (SYS_NICE)
  set_mempolicy_home_node
  uselib ustat sysfs _sysctl nfsservctl getpmsg putpmsg         obsolete or never implemented;
  afs_syscall tuxcall security vserver                          old attack surface
  ============================================================  ===================================

Allowed, as by Docker on kernels >= 4.8: ptrace, process_vm_readv/writev (a sandbox's own
processes only: each exec has its own PID namespace); chroot (root execs keep CAP_SYS_CHROOT).
Everything else in the tables up to 450 is allowed: the denied set above is the complement of
Docker's allow list there (plus io_uring).
"""

from __future__ import annotations

import errno
import functools
import os
import platform
import struct

#: name -> syscall number, for every syscall the filter treats specially
X86_64 = {
    "socket": 41, "clone": 56, "syslog": 103, "uselib": 134, "personality": 135, "ustat": 136,
    "sysfs": 139, "vhangup": 153, "pivot_root": 155, "_sysctl": 156, "acct": 163,
    "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168,
    "reboot": 169, "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173,
    "create_module": 174, "init_module": 175, "delete_module": 176, "get_kernel_syms": 177,
    "query_module": 178, "quotactl": 179, "nfsservctl": 180, "getpmsg": 181, "putpmsg": 182,
    "afs_syscall": 183, "tuxcall": 184, "security": 185, "lookup_dcookie": 212,
    "clock_settime": 227, "vserver": 236, "mbind": 237, "set_mempolicy": 238,
    "get_mempolicy": 239, "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250,
    "migrate_pages": 256, "unshare": 272, "move_pages": 279, "perf_event_open": 298,
    "fanotify_init": 300, "open_by_handle_at": 304, "setns": 308, "kcmp": 312,
    "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "clone3": 435, "pidfd_getfd": 438, "process_madvise": 440,
    "mount_setattr": 442, "quotactl_fd": 443, "set_mempolicy_home_node": 450,
}
#: the same for aarch64 (the generic table; it has no legacy x86 calls)
AARCH64 = {
    "lookup_dcookie": 18, "umount2": 39, "mount": 40, "pivot_root": 41, "nfsservctl": 42,
    "vhangup": 58, "quotactl": 60, "acct": 89, "personality": 92, "unshare": 97,
    "kexec_load": 104, "init_module": 105, "delete_module": 106, "clock_settime": 112,
    "syslog": 116, "reboot": 142, "sethostname": 161, "setdomainname": 162, "settimeofday": 170,
    "socket": 198, "add_key": 217, "request_key": 218, "keyctl": 219, "clone": 220, "swapon": 224,
    "swapoff": 225, "mbind": 235, "get_mempolicy": 236, "set_mempolicy": 237,
    "migrate_pages": 238, "move_pages": 239, "perf_event_open": 241, "fanotify_init": 262,
    "open_by_handle_at": 265, "setns": 268, "kcmp": 272, "finit_module": 273, "bpf": 280,
    "userfaultfd": 282, "kexec_file_load": 294, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435,
    "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442, "quotactl_fd": 443,
    "set_mempolicy_home_node": 450,
}
#: the newest syscall number both tables know; anything above gets ENOSYS
MAX_KNOWN = 450
#: handled by argument checks or ENOSYS, not by a plain EPERM
_SPECIAL = {"clone", "clone3", "socket", "personality"}
CLONE_NAMESPACE_FLAGS = 0x7E020000
AF_VSOCK = 40
PERSONALITY_ALLOWED = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000
_ARCHES = {"x86_64": (AUDIT_ARCH_X86_64, X86_64), "aarch64": (AUDIT_ARCH_AARCH64, AARCH64)}

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ, _JGE, _JGT, _JSET = 0x15, 0x35, 0x25, 0x45
_RET_K = 0x06
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # args[0]'s low 32 bits (little-endian)

Insn = tuple[int, str | int, str | int, int]


class _Asm:
    """Instructions with symbolic jump targets, resolved to relative offsets at the end."""

    def __init__(self) -> None:
        self.code: list[Insn] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load(self, offset: int) -> None:
        self.code.append((_LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, jt: str | int = 0, jf: str | int = 0) -> None:
        self.code.append((op, jt, jf, k))

    def ret(self, k: int) -> None:
        self.code.append((_RET_K, 0, 0, k))

    def assemble(self) -> bytes:
        out = bytearray()
        for i, (op, jt, jf, k) in enumerate(self.code):
            rel = [self.labels[t] - i - 1 if isinstance(t, str) else t for t in (jt, jf)]
            if not all(0 <= r < 256 for r in rel):
                raise ValueError(f"seccomp: jump out of range at instruction {i}")
            out += struct.pack("=HBBI", op, rel[0], rel[1], k)
        return bytes(out)


def _arch_body(asm: _Asm, p: str, table: dict[str, int]) -> None:
    asm.load(_OFF_NR)
    if table is X86_64:
        asm.jump(_JGE, X32_SYSCALL_BIT, "kill")
    asm.jump(_JGT, MAX_KNOWN, "enosys")
    for name, nr in sorted(table.items(), key=lambda kv: kv[1]):
        if name not in _SPECIAL:
            asm.jump(_JEQ, nr, "eperm")
    asm.jump(_JEQ, table["clone3"], "enosys")
    asm.jump(_JEQ, table["clone"], f"{p}clone")
    asm.jump(_JEQ, table["socket"], f"{p}socket")
    asm.jump(_JEQ, table["personality"], f"{p}personality", "allow")
    asm.label(f"{p}clone")
    asm.load(_OFF_ARG0)
    asm.jump(_JSET, CLONE_NAMESPACE_FLAGS, "eperm", "allow")
    asm.label(f"{p}socket")
    asm.load(_OFF_ARG0)
    asm.jump(_JEQ, AF_VSOCK, "eperm", "allow")
    asm.label(f"{p}personality")
    asm.load(_OFF_ARG0)
    for value in PERSONALITY_ALLOWED:
        asm.jump(_JEQ, value, "allow")
    asm.ret(RET_ERRNO | errno.EPERM)  # not "eperm": keeps every jump short


def build_program() -> bytes:
    """The filter as bwrap's ``--seccomp`` wants it: an array of ``struct sock_filter``."""
    asm = _Asm()
    asm.load(_OFF_ARCH)
    asm.jump(_JEQ, AUDIT_ARCH_X86_64, "x86_64")
    asm.jump(_JEQ, AUDIT_ARCH_AARCH64, "aarch64", "kill")
    for arch, (_audit, table) in _ARCHES.items():
        asm.label(arch)
        _arch_body(asm, arch + "_", table)
    asm.label("allow")
    asm.ret(RET_ALLOW)
    asm.label("eperm")
    asm.ret(RET_ERRNO | errno.EPERM)
    asm.label("enosys")
    asm.ret(RET_ERRNO | errno.ENOSYS)
    asm.label("kill")
    asm.ret(RET_KILL_PROCESS)
    return asm.assemble()


def _policy() -> tuple[object, ...]:
    """Everything :func:`build_program` reads: the key of its cache."""
    return (tuple(X86_64.items()), tuple(AARCH64.items()), MAX_KNOWN,
            frozenset(_SPECIAL), CLONE_NAMESPACE_FLAGS, AF_VSOCK, PERSONALITY_ALLOWED)


@functools.lru_cache(maxsize=4)
def _compiled(policy: tuple[object, ...]) -> bytes:
    del policy  # the key only: build_program reads the same module state
    return build_program()


def program() -> bytes:
    """The filter, compiled once per process for its inputs (a changed table or constant is a
    new key, never served the program of the old one)."""
    return _compiled(_policy())


def supported() -> bool:
    """True on the architectures the filter has a table for (elsewhere it would kill all)."""
    return platform.machine() in _ARCHES


def program_fd() -> int:
    """A readable fd holding the program, for one bwrap (``pass_fds``); the caller closes it.
    A pipe: bwrap reads it to the end, and the program (< 2 KiB) fits its buffer."""
    prog = program()
    r, w = os.pipe()
    try:
        os.write(w, prog)
    finally:
        os.close(w)
    return r


def docker_profile() -> dict[str, object]:
    """The same rules as a Docker seccomp profile (``--security-opt seccomp=FILE``), for daemons
    whose built-in default still allows io_uring (Docker < 25): every syscall the local filter
    refuses gets EPERM, clone with a namespace flag EPERM, clone3 ENOSYS, everything else is
    allowed. Docker's own capability and no-new-privileges rules still apply on top."""
    denied = sorted(set(X86_64) - _SPECIAL)
    rules: list[dict[str, object]] = [
        {"names": denied, "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
        {"names": ["socket"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM,
         "args": [{"index": 0, "value": AF_VSOCK, "op": "SCMP_CMP_EQ"}]},
    ]
    for bit in range(32):  # "any namespace flag set": one masked-equality rule per flag
        flag = 1 << bit
        if CLONE_NAMESPACE_FLAGS & flag:
            rules.append({"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM,
                          "args": [{"index": 0, "value": flag, "valueTwo": flag,
                                    "op": "SCMP_CMP_MASKED_EQ"}]})
    return {"defaultAction": "SCMP_ACT_ALLOW",
            "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"], "syscalls": rules}
