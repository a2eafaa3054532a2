"""The keeper's loop (zygote_keeper.Keeper.serve) in-process, without namespaces: cheap checks
of its behaviour when the machine is full."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentmeter.sandbox import zygote, zygote_keeper, zygote_wire


def test_a_keeper_whose_fork_fails_does_not_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a pids limit (EAGAIN) the fork of the next exec's child fails; the idle keeper must
    wait for a request then, not retry the fork in a tight loop (64 keepers at 100% CPU)."""
    ours, theirs = socket.socketpair()
    keeper = zygote_keeper.Keeper(theirs, {"cgroup": [], "keyring": False})
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


def test_a_fork_server_whose_fork_fails_fails_that_start_only() -> None:
    """The fork server (one per harness) forks every keeper; a fork failing at a pids limit
    must fail that sandbox's start with the reason, not end the server with every start queued
    behind it."""
    ours, theirs = socket.socketpair()
    code = ("import errno, os, runpy, sys\n"
            "def fork():\n"
            "    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))\n"
            "os.fork = fork\n"
            "sys.argv = sys.argv[1:]\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    server = subprocess.Popen([sys.executable, "-I", "-S", "-c", code, str(zygote.SERVER),
                               str(theirs.fileno())], pass_fds=(theirs.fileno(),))
    theirs.close()
    try:
        for _ in range(2):
            keeper_ours, keeper_theirs = socket.socketpair()
            socket.send_fds(ours, [zygote_wire.frame({"tree": "/nonexistent"})],
                            [keeper_theirs.fileno()])
            keeper_theirs.close()
            keeper_ours.settimeout(20)
            line = keeper_ours.makefile("rb").readline()
            keeper_ours.close()
            assert json.loads(line or b"{}").get("error", "").startswith("fork: "), line
            assert server.poll() is None
        ours.close()  # the harness's end closes: the server ends
        assert server.wait(20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_the_fork_server_runs_only_its_own_directory_s_modules(tmp_path: Path) -> None:
    """The fork server runs as host root, a script in isolated mode whose code is in sibling
    modules: they must come from its own directory (the installed package's), never from a
    module of the same name in the current directory or on ``PYTHONPATH``."""
    marker = tmp_path / "planted module ran"
    for name in ("zygote_forkserver", "zygote_keeper", "zygote_children", "zygote_calls",
                 "zygote_direct", "zygote_root", "zygote_wire", "agentmeter_zygote"):
        (tmp_path / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    ours, theirs = socket.socketpair()
    server = subprocess.Popen([sys.executable, "-I", "-S", str(zygote.SERVER),
                               str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                              cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    theirs.close()
    try:
        keeper_ours, keeper_theirs = socket.socketpair()
        socket.send_fds(ours, [zygote_wire.frame({"tree": "/nonexistent"})],
                        [keeper_theirs.fileno()])
        keeper_theirs.close()
        keeper_ours.settimeout(20)
        line = keeper_ours.makefile("rb").readline()  # the real keeper's answer
        keeper_ours.close()
        assert b"error" in line, line
        ours.close()
        assert server.wait(20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert not marker.exists()


def test_a_keeper_that_never_gets_ready_fails_its_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A keeper stuck in its setup (it holds its socket and never says ready) must not hold the
    trial's start on its worker thread forever: the start fails, naming the cause."""
    from agentmeter.sandbox.spec import SandboxError

    server_end, fake_server = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    held: list[socket.socket] = []

    def silent_server() -> None:  # takes the keeper's socket, then says nothing
        _, fds, _, _ = socket.recv_fds(fake_server, 65536, 4)
        held.extend(socket.socket(fileno=fd) for fd in fds)

    t = threading.Thread(target=silent_server, daemon=True)
    t.start()
    monkeypatch.setattr(zygote, "_fork_server", lambda: server_end)
    monkeypatch.setattr(zygote, "READY_TIMEOUT_S", 0.3)
    with pytest.raises(SandboxError, match="not ready within"):
        zygote.start_keeper({"op": "start"})
    t.join(5)
    for s in (*held, server_end, fake_server):
        s.close()
