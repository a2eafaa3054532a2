"""What every local exec hides of the kernel: Docker's read-only and masked proc paths, the
capabilities a root exec keeps, and the harness's session keyring (see ``local.py``)."""

from __future__ import annotations

import functools
import os

from agentmeter.sandbox.output import CappedBuffer

#: Docker's default capabilities minus MKNOD, NET_RAW, AUDIT_WRITE and SETFCAP.
ROOT_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_SETGID",
             "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL")


#: the capabilities' numbers (linux/capability.h)
CAP_NUMBERS = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_FSETID": 4, "CAP_KILL": 5,
               "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8, "CAP_NET_BIND_SERVICE": 10,
               "CAP_SYS_CHROOT": 18}


def root_cap_numbers() -> list[int]:
    """ROOT_CAPS as numbers, ascending."""
    return sorted(CAP_NUMBERS[c] for c in ROOT_CAPS)


#: proc paths bound read-only over themselves in every exec (Docker's read-only paths)
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
#: proc paths hidden in every exec: files behind /dev/null (unreadable: bwrap binds it nodev),
#: directories behind an empty read-only tmpfs (Docker's masked paths, plus key-users)
PROC_MASKED = ("kcore", "keys", "key-users", "timer_list", "timer_stats", "sched_debug",
               "latency_stats", "asound", "acpi", "scsi")

#: argv prefix: run the command in a fresh anonymous session keyring (keyctl's one-line notice
#: on stderr is dropped by :class:`SessionNoticeFilter`)
KEYRING_WRAPPER = ("keyctl", "session", "-")
_NOTICE = b"Joined session keyring: "


class SessionNoticeFilter(CappedBuffer):
    """Captures stderr without the notice ``keyctl session`` writes before it runs the command."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._start: bytearray | None = bytearray()

    def feed(self, chunk: bytes) -> None:
        if self._start is None:
            super().feed(chunk)
            return
        self._start += chunk
        head = bytes(self._start)
        end = head.find(b"\n")
        if end < 0 and len(head) < 64 and _NOTICE.startswith(head[:len(_NOTICE)]):
            return  # the notice may still be arriving
        self._start = None
        if end >= 0 and head.startswith(_NOTICE):
            head = head[end + 1:]
        if head:
            super().feed(head)

    def text(self) -> str:
        if self._start:  # a first line that never ended: not the notice
            pending, self._start = bytes(self._start), None
            super().feed(pending)
        return super().text()


@functools.cache
def proc_mask_list() -> tuple[tuple[str, str], ...]:
    """The proc paths this kernel has that every exec protects, in order, as (how, name): "ro"
    the host's proc path read-only over it, "null" /dev/null over a file, "tmpfs" an empty
    read-only tmpfs over a directory (bwrap cannot cover a path that does not exist)."""
    masks = [("ro", name) for name in PROC_READ_ONLY if os.path.exists(f"/proc/{name}")]
    for name in PROC_MASKED:
        path = f"/proc/{name}"
        if os.path.isdir(path):
            masks.append(("tmpfs", name))
        elif os.path.exists(path):
            masks.append(("null", name))
    return tuple(masks)


@functools.cache
def proc_masks() -> tuple[str, ...]:
    """:func:`proc_mask_list` as bwrap arguments (to follow ``--proc /proc``)."""
    args: list[str] = []
    for how, name in proc_mask_list():
        path = f"/proc/{name}"
        if how == "ro":
            args += ["--ro-bind", path, path]
        elif how == "tmpfs":
            args += ["--tmpfs", path, "--remount-ro", path]
        else:
            args += ["--ro-bind", "/dev/null", path]
    return tuple(args)
