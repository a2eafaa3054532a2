"""The hostile-agent battery: a suite of tasks whose solutions attack instead of solving
(tests/hostile_suite.py), run with the ``oracle`` agent on both backends. Containment is judged
from the host: no attempt reports a breach, no planted secret reaches the stored results, host
state is unchanged, nothing the agent started outlives the run, host memory and the store stay
bounded, and every hostile solution scores 0 without turning its failure into infra_invalid."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import resource
import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker_fixtures import docker_backend_fixture, docker_daemon_fixture  # noqa: F401
from hostile_suite import Hostile, hostile_tasks, root_agent_tasks, write_suite

from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.sandbox.protocol import SandboxBackend
from agentmeter.store.db import Store

#: the issue asks for at least 30 distinct attempts
MIN_ATTEMPTS = 30
#: the battery's tasks whose attempts a root agent makes with more power (the others do not
#: depend on the agent's uid, or are moot for root: $AS_AGENT), run again with a root agent
ROOT_SUBSET = ("syscalls", "host-reads", "forge-files", "fill-disk")
#: what root in a sandbox may do, as root in a Docker container may: chroot within its own tree
ROOT_ALLOWED = {"seccomp.chroot"}
#: left out for a root agent: it may ptrace its exec's init (bwrap's: the same seccomp filter,
#: no capabilities, as /proc/1/status shows), which stays stopped, so the agent hangs itself
#: until its timeout (a 'timeout' trial): a minute of test time that proves nothing more
ROOT_SKIPPED = ("seccomp.ptrace_init",)
CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")


class Listener:
    """A host TCP service on all addresses that hands a secret to anyone who connects."""

    def __init__(self, banner: str) -> None:
        self.sock = socket.create_server(("0.0.0.0", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.banner = banner.encode()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.sendall(self.banner)

    def close(self) -> None:
        self.sock.close()


def _host_ip() -> str:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1))
        return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"
    finally:
        s.close()


def _add_host_key(desc: str, payload: str) -> int:
    """A key on the host root's user keyring (KEY_SPEC_USER_KEYRING = -4)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    key = libc.syscall(ctypes.c_long(248), b"user", desc.encode(), payload.encode(),
                       ctypes.c_long(len(payload)), ctypes.c_long(-4))
    return int(key)


def _revoke_key(key: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(ctypes.c_long(250), ctypes.c_long(3), ctypes.c_long(key))  # KEYCTL_REVOKE


def _host_processes(marker: str) -> list[str]:
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd:
                found.append(f"{p.name}: {cmd}")
    return found


def _stored_text(run_dir: Path) -> str:
    parts = []
    for f in sorted(run_dir.rglob("*")):
        if f.is_file() and f.stat().st_size < 64 << 20:
            parts.append(f.read_bytes().decode(errors="replace"))
    return "\n".join(parts)


@pytest.fixture
def planted(tmp_path: Path) -> Iterator[dict[str, str]]:
    tag = secrets.token_hex(8)
    values = {"canary_path": f"/root/.am-canary-{tag}", "canary": f"canary-{secrets.token_hex(12)}",
              "env_name": "AGENTMETER_HOSTILE_SECRET", "env": f"env-{secrets.token_hex(12)}",
              "key_desc": f"am-hostile-{tag}", "key": f"key-{secrets.token_hex(12)}",
              "net": f"net-{secrets.token_hex(12)}"}
    Path(values["canary_path"]).write_text(values["canary"])
    os.chmod(values["canary_path"], 0o600)
    os.environ[values["env_name"]] = values["env"]
    key = _add_host_key(values["key_desc"], values["key"])
    core_pattern = CORE_PATTERN.read_text()
    try:
        yield values
    finally:
        if CORE_PATTERN.read_text() != core_pattern:  # a breach must not outlive the test
            CORE_PATTERN.write_text(core_pattern)
        os.environ.pop(values["env_name"], None)
        Path(values["canary_path"]).unlink(missing_ok=True)
        if key > 0:
            _revoke_key(key)


def _without(task: Hostile, ids: tuple[str, ...]) -> Hostile:
    """``task`` without the attempts ``ids`` (their lines in its solution)."""
    lines = [ln for ln in task.solve.splitlines(keepends=True)
             if not any(f'attempt("{i}"' in ln for i in ids)]
    return dataclasses.replace(task, solve="".join(lines),
                               attempts=tuple(a for a in task.attempts if a not in ids))


async def _battery(tmp_path: Path, backend_name: str, planted: dict[str, str], *,
                   root: bool = False) -> None:
    """``root``: the agent runs as the image's root, as Harbor runs a task whose image sets no
    USER, and also makes the attempts only root can (hostile_suite.root_agent_tasks)."""
    listener = Listener(planted["net"])
    core_pattern = CORE_PATTERN.read_text()
    tasks = hostile_tasks(planted, listener.port, _host_ip())
    if root:
        tasks = [_without(t, ROOT_SKIPPED) for t in tasks if t.name in ROOT_SUBSET] \
            + root_agent_tasks(tmp_path / "runs")
    expected = {a for t in tasks for a in t.attempts}
    assert len(expected) >= MIN_ATTEMPTS, sorted(expected)
    suite = write_suite(tmp_path / "hostile", tasks, sandbox_account=not root)
    store = Store.open(tmp_path / "runs")
    try:
        rid, _ = await run(store, prepare(RunRequest(
            suites=[str(suite)], agents=["oracle"], backend=backend_name, concurrency=2,
            max_infra_retries=0)))
        trials = {t.task_id: t for t in store.latest_completed_trials(rid)}
        run_dir = store.run_dir(rid)
    finally:
        listener.close()
    stored = _stored_text(run_dir)

    # every attempt ran (its TRIED line is in the stored logs) and none got through
    tried = set(re.findall(r"TRIED:([A-Za-z0-9_.]+)", stored))
    assert expected <= tried, f"attempts that never ran: {sorted(expected - tried)}"
    breaches = sorted(b for b in set(re.findall(r"BREACH:[^\n]*", stored))
                      if not (root and b.split()[0][len("BREACH:"):] in ROOT_ALLOWED))
    assert breaches == [], "\n".join(breaches)
    for name in ("canary", "env", "key", "net"):
        assert planted[name] not in stored, f"the host's {name} secret reached the results"
    assert listener.connections == 0

    # hostile solutions score 0 and cannot make their failure an infrastructure fault
    assert set(trials) == {t.name for t in tasks}
    for task_id, t in trials.items():
        assert t.status in (TrialStatus.FAILED, TrialStatus.AGENT_ERROR, TrialStatus.TIMEOUT), \
            f"{task_id}: {t.status.value} {t.error}"
        assert not t.passed and not t.reward, f"{task_id}: reward {t.reward}"  # 0, or none read

    # the host is as it was, nothing outlived the run, and the host stayed bounded
    assert CORE_PATTERN.read_text() == core_pattern
    assert not list((tmp_path / "runs").rglob("am-root-pwned")), "the agent wrote the store"
    assert _host_processes("am-hostile-daemon") == []
    if "huge-outputs" in trials:
        problems = " ".join(trials["huge-outputs"].extra.get("artifact_problems", []))
        assert "/app/out" in problems
    size = sum(f.stat().st_size for f in run_dir.rglob("*") if f.is_file())
    assert size < 200 << 20, f"the store grew by {size >> 20} MiB"
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert peak_kib < 2 << 20, f"host process peaked at {peak_kib >> 10} MiB"


async def test_hostile_battery_local(tmp_path: Path, planted: dict[str, str]) -> None:
    await _battery(tmp_path, "local", planted)


@pytest.mark.slow
async def test_hostile_battery_local_root_agent(tmp_path: Path, planted: dict[str, str]) -> None:
    """The battery with the agent as the sandbox's root (a Harbor image without USER)."""
    await _battery(tmp_path, "local", planted, root=True)


async def test_hostile_battery_docker(tmp_path: Path, planted: dict[str, str],
                                      docker_backend: SandboxBackend) -> None:
    await _battery(tmp_path, "docker", planted)
