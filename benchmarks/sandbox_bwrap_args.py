"""What each class of a local exec's bwrap arguments costs (issue 30): one root-run sandbox;
the bwrap argv of its exec ``true`` (``_command``, the bwrap path), then that argv with one
class of arguments dropped at a time, run through the same keeper, the variants taking turns,
N rounds; p50 of each and what dropping the class saves. Each bwrap exec drops the keeper's
spare child (made for an exec without bwrap) and forks one on its path; the last row, an exec
without bwrap (``sb.exec``) after a bwrap one, so builds its root on its path too: see
``sandbox_ab.py`` for a lifecycle's figures.
Usage: PYTHONPATH=src python benchmarks/sandbox_bwrap_args.py [N]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable

from agentmeter.sandbox import seccomp, zygote, zygote_wire
from agentmeter.sandbox.local import LocalBackend, LocalSandbox
from agentmeter.sandbox.spec import SandboxSpec

#: how many values each bwrap option takes
ARITY = {"--bind": 2, "--ro-bind": 2, "--dev-bind": 2, "--proc": 1, "--tmpfs": 1, "--remount-ro": 1,
         "--hostname": 1, "--chdir": 1, "--setenv": 2, "--cap-add": 1, "--cap-drop": 1,
         "--seccomp": 1, "--dev": 1, "--uid": 1, "--gid": 1}
Pred = Callable[[str, list[str]], bool]


def drop(argv: list[str], pred: Pred) -> list[str]:
    """``argv`` without the options ``pred(option, values)`` names."""
    out, i = [argv[0]], 1
    while i < len(argv):
        opt = argv[i]
        if opt == "--":
            return out + argv[i:]
        n = ARITY.get(opt, 0)
        values = argv[i + 1:i + 1 + n]
        if not pred(opt, values):
            out += [opt, *values]
        i += 1 + n
    return out


def masks(opt: str, values: list[str]) -> bool:
    return opt in ("--ro-bind", "--tmpfs", "--remount-ro") and values[-1].startswith("/proc/")


VARIANTS: dict[str, Pred | None] = {
    "full": lambda o, v: False,
    "-masks": masks,
    "-proc and masks": lambda o, v: masks(o, v) or o == "--proc",
    "-dev": lambda o, v: o == "--dev-bind",
    "-setenv": lambda o, v: o == "--setenv",
    "-caps": lambda o, v: o in ("--cap-add", "--cap-drop"),
    "-seccomp": lambda o, v: o == "--seccomp",
    "-ipc,uts,cgroup,hostname": lambda o, v: o in ("--unshare-ipc", "--unshare-uts",
                                                   "--unshare-cgroup-try", "--hostname"),
    "-pid": lambda o, v: o == "--unshare-pid",
    "bwrap --bind tree / only": lambda o, v: not (o == "--bind" and v[1] == "/"),
    "no bwrap (exec without bwrap)": None,
}


async def run_once(sb: LocalSandbox, argv: list[str] | None) -> int:
    """``argv`` through the keeper as a bwrap exec; None: ``true`` as an exec without bwrap."""
    if argv is None:
        return (await sb.exec(["true"], user="root")).exit_code
    assert isinstance(sb._keeper, zygote.Keeper)
    sfd = seccomp.program_fd()
    try:
        ex = await sb._keeper.spawn({"argv": argv, "env": {"PATH": os.environ["PATH"]}},
                                    cgroup=[], keyring=sb._keyring, stdin=False, seccomp_fd=sfd)
    finally:
        os.close(sfd)

    async def drain(reader: asyncio.StreamReader | None) -> None:
        while reader is not None and await reader.read(65536):
            pass

    await asyncio.gather(drain(ex.stdout), drain(ex.stderr))
    code = await ex.wait()
    ex.close()
    return code


async def main(n: int) -> None:
    sb = await LocalBackend().start(SandboxSpec())
    argv = sb._command(["true"], sb.workdir, sb._env("root", None), "root", zygote_wire.SECCOMP_FD)
    print(" ".join(argv))
    times: dict[str, list[float]] = {k: [] for k in VARIANTS}
    for _ in range(n):
        for name, pred in VARIANTS.items():
            variant = None if pred is None else drop(argv, pred)
            t = time.perf_counter()
            if await run_once(sb, variant) != 0:
                print("exit status not 0:", name)
            times[name].append((time.perf_counter() - t) * 1000)
    base = statistics.median(times["full"])
    for name, xs in times.items():
        m = statistics.median(xs)
        print(f"{name:28s} p50 {m:6.2f} ms  saves {base - m:5.2f}")
    await sb.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50))
