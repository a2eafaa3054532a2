"""What every local exec hides of the kernel: Docker's read-only and masked proc paths, and the
harness's session keyring (see ``local.py``)."""

from __future__ import annotations

import functools
import os

#: proc paths bound read-only over themselves in every exec (Docker's read-only paths)
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
#: proc paths hidden in every exec: files behind /dev/null (unreadable: bwrap binds it nodev),
#: directories behind an empty read-only tmpfs (Docker's masked paths, plus key-users)
PROC_MASKED = ("kcore", "keys", "key-users", "timer_list", "timer_stats", "sched_debug",
               "latency_stats", "asound", "acpi", "scsi")

#: argv prefix: join a fresh anonymous session keyring, then run "$@" (keyctl's notice on
#: stderr goes nowhere; the command gets the real stderr back)
KEYRING_WRAPPER = ("sh", "-c", 'exec 3>&2 2>/dev/null; exec keyctl session - sh -c '
                   '\'exec 2>&3 3>&-; exec "$@"\' sh "$@"', "sh")


@functools.cache
def proc_masks() -> tuple[str, ...]:
    """bwrap arguments protecting the proc paths this kernel has (to follow ``--proc /proc``;
    bwrap cannot cover a path that does not exist)."""
    args: list[str] = []
    for name in PROC_READ_ONLY:
        if os.path.exists(f"/proc/{name}"):
            args += ["--ro-bind", f"/proc/{name}", f"/proc/{name}"]
    for name in PROC_MASKED:
        path = f"/proc/{name}"
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    return tuple(args)
