"""The keeper's loop (zygote_server.Keeper.serve) in-process, without namespaces: cheap checks
of its behaviour when the machine is full."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from agentmeter.sandbox import zygote_server


def test_a_keeper_whose_fork_fails_does_not_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a pids limit (EAGAIN) the fork of the next exec's child fails; the idle keeper must
    wait for a request then, not retry the fork in a tight loop (64 keepers at 100% CPU)."""
    ours, theirs = socket.socketpair()
    keeper = zygote_server.Keeper(theirs, {"cgroup": [], "keyring": False})
    calls = 0

    def failing_prefork() -> None:
        nonlocal calls
        calls += 1

    monkeypatch.setattr(keeper, "_prefork", failing_prefork)
    served = threading.Thread(target=keeper.serve, daemon=True)
    served.start()
    time.sleep(0.3)
    ours.close()  # the harness's end closes: the keeper ends
    served.join(5)
    theirs.close()
    assert not served.is_alive()
    assert calls <= 2, f"the keeper retried a failed fork {calls} times in 0.3 s"
