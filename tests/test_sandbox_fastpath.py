"""Caches on the local sandbox's start path (docs/benchmarks.md, issue 30): each is keyed on what
it is made from, so a changed input is never served a stale result. Unit-level, no sandbox."""

from __future__ import annotations

import pytest

from agentmeter.sandbox import seccomp


def test_seccomp_program_is_compiled_once_per_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    first = seccomp.program()
    assert first == seccomp.build_program()
    assert seccomp.program() is first  # cached: not rebuilt per exec
    # a changed rule (a constant, a table entry) is a new key: rebuilt, never the old program
    monkeypatch.setattr(seccomp, "AF_VSOCK", 41)
    changed = seccomp.program()
    assert changed != first and changed == seccomp.build_program()
    monkeypatch.setitem(seccomp.X86_64, "uselib", 135)
    assert seccomp.program() not in (first, changed)
    monkeypatch.undo()
    assert seccomp.program() == first


def test_seccomp_program_fd_holds_the_cached_program() -> None:
    import os
    fd = seccomp.program_fd()
    try:
        assert os.read(fd, 1 << 16) == seccomp.program()
    finally:
        os.close(fd)
