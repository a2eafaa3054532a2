"""The local backend's seccomp filter, attacked from inside as the agent and as root: each
syscall Docker's default profile denies is refused, ordinary programs still work. The probes
use perl's raw ``syscall`` (perl-base is in every Debian image)."""

from __future__ import annotations

import pytest

from agentmeter.sandbox import seccomp
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import SandboxSpec

pytestmark = pytest.mark.skipif(not seccomp.supported(), reason="no seccomp table for this arch")

T = seccomp.X86_64 if seccomp.platform.machine() == "x86_64" else seccomp.AARCH64
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17

#: (what, syscall number, args) -> must fail with EPERM
DENIED = [
    ("keyctl: read the host root's keyring", T["keyctl"], (0, 0xFFFFFFFC)),  # KEYCTL_GET_KEYRING_ID
    ("add_key", T["add_key"], (0, 0, 0, 0, 0xFFFFFFFC)),
    ("request_key", T["request_key"], (0, 0, 0, 0)),
    ("bpf: load a program", T["bpf"], (5, 0, 0)),  # BPF_PROG_LOAD
    ("perf_event_open", T["perf_event_open"], (0, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0)),
    ("io_uring_setup", T["io_uring_setup"], (1, 0)),
    ("userfaultfd", T["userfaultfd"], (0,)),
    ("unshare(CLONE_NEWUSER): a nested user namespace", T["unshare"], (CLONE_NEWUSER,)),
    ("clone(CLONE_NEWUSER)", T["clone"], (CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)),
    ("setns", T["setns"], (0, 0)),
    ("mount", T["mount"], (0, 0, 0, 0, 0)),
    ("fsopen", T["fsopen"], (0, 0)),
    ("open_by_handle_at", T["open_by_handle_at"], (0, 0, 0)),
    ("kexec_load", T["kexec_load"], (0, 0, 0, 0)),
    ("init_module", T["init_module"], (0, 0, 0)),
    ("swapoff", T["swapoff"], (0,)),
    ("clock_settime", T["clock_settime"], (0, 0)),
    ("syslog: read the kernel log", T["syslog"], (3, 0, 0)),
    ("personality(ADDR_NO_RANDOMIZE)", T["personality"], (0x0040000,)),
    ("socket(AF_VSOCK)", T["socket"], (40, 1, 0)),
    ("kcmp", T["kcmp"], (1, 1, 0, 0, 0)),
]


def _probe_script(cases: list[tuple[str, int, tuple[int, ...]]]) -> str:
    lines = ["use Errno;"]
    for i, (_what, nr, args) in enumerate(cases):
        a = ", ".join(str(x) for x in (nr, *args))
        lines.append(f'$! = 0; $r = syscall({a}); print "{i} $r " . ($!+0) . "\\n";')
    return "\n".join(lines)


@pytest.fixture
async def sb(local_backend: LocalBackend):  # type: ignore[no-untyped-def]
    box = await local_backend.start(SandboxSpec())
    yield box
    await box.stop()


@pytest.mark.parametrize("user", ["agent", "root"])
async def test_denied_syscalls_fail_with_eperm(sb, user: str) -> None:  # type: ignore[no-untyped-def]
    r = await sb.exec(["perl", "-e", _probe_script(DENIED)], user=user)
    assert r.exit_code == 0, r.stderr
    got = {int(i): (int(ret), int(err)) for i, ret, err in (ln.split() for ln in r.stdout.splitlines())}
    wrong = [DENIED[i][0] + f" -> ret {ret} errno {err}" for i, (ret, err) in got.items()
             if (ret, err) != (-1, 1)]
    assert not wrong and len(got) == len(DENIED), wrong


@pytest.mark.parametrize("user", ["agent", "root"])
async def test_namespace_and_mount_tools_refused(sb, user: str) -> None:  # type: ignore[no-untyped-def]
    r = await sb.exec("unshare -U -r id -u; echo unshare=$?; unshare -n true; echo net=$?;"
                      " mount -t tmpfs t /mnt; echo mount=$?; grep '^Seccomp:' /proc/self/status",
                      user=user)
    assert "unshare=1" in r.stdout and "net=1" in r.stdout, r.stdout + r.stderr
    assert "mount=0" not in r.stdout
    assert "Seccomp:\t2" in r.stdout  # filter mode


async def test_clone3_is_enosys_and_ordinary_programs_work(sb) -> None:  # type: ignore[no-untyped-def]
    nr = T["clone3"]
    r = await sb.exec(["perl", "-e", f'$! = 0; syscall({nr}, 0, 0); print $!+0, "\\n";'], user="agent")
    assert r.stdout.strip() == "38"  # ENOSYS: libc falls back to clone
    # fork, threads (sort --parallel), pipes, setuid-free tools, the personality query
    r = await sb.exec("seq 1 200000 | sort -n --parallel=4 -S 10M | tail -1;"
                      " (sleep 0.01 &); wait; echo forked; uname -m; setarch -R true 2>/dev/null;"
                      " echo aslr=$?", user="agent")
    assert r.stdout.splitlines()[:2] == ["200000", "forked"], r.stdout + r.stderr
    assert "aslr=0" not in r.stdout  # setarch -R sets ADDR_NO_RANDOMIZE: refused


def test_program_shape() -> None:
    prog = seccomp.build_program()
    assert len(prog) % 8 == 0 and len(prog) // 8 < 4096  # BPF_MAXINSNS
    assert seccomp.CLONE_NAMESPACE_FLAGS == 0x7E020000  # Docker's mask
