"""The kinds of exec a root-run local sandbox makes, for tests that check each keeps the same
confinement (tests/test_hostile_exec*.py): a root and an agent command, one given stdin (its
own pipe), a copy out's (the host's busybox, copyout.py) as the agent and as root, and a
compose sidecar's (a sandbox that joins another's network)."""

from __future__ import annotations

from agentmeter.sandbox.archive import CappedBytes
from agentmeter.sandbox.local import LocalSandbox
from agentmeter.sandbox.masks import CAP_NUMBERS, ROOT_CAPS

#: the capability set a root exec keeps, as /proc/<pid>/status shows it
ROOT_MASK = sum(1 << CAP_NUMBERS[c] for c in ROOT_CAPS)

#: (kind, user, stdin, through the copy out's busybox)
KINDS = {
    "root": ("root", None, False),
    "agent": ("agent", None, False),
    "agent-stdin": ("agent", b"in", False),
    "root-stdin": ("root", b"in", False),
    "copyout-agent": ("agent", None, True),
    "copyout-root": ("root", None, True),
}


async def run_kind(sb: LocalSandbox, kind: str, argv: list[str]) -> str:
    """``argv`` (a program busybox also has: cat, ls, readlink, env...) run as an exec of
    ``kind``; its stdout. A copy out runs it the way copyout.py runs tar (``BusyboxRun``)."""
    user, stdin, busybox = KINDS[kind]
    if busybox:
        sink = CappedBytes(kind, 1 << 20)
        code, err = await sb._busybox(argv, user, sink)
        assert code == 0, (kind, argv, err)
        return sink.data.decode()
    r = await sb.exec(argv, user=user, stdin=stdin, cwd="/")
    assert r.exit_code == 0, (kind, argv, r)
    return r.stdout


def status_fields(text: str) -> dict[str, str]:
    """/proc/<pid>/status as {field: value with single spaces}."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        out[key] = " ".join(value.split())
    return out
