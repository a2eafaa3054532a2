"""The local backend run by an ordinary user (uid 1000): user namespaces instead of root, limits
that need cgroups degrade with a printed notice. The test drops privileges for a child Python
process that uses the package from a private copy (root's home is not readable by that user)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

import agentmeter

CHILD = r'''
import asyncio, json, os, socket, tempfile, time
from pathlib import Path
from agentmeter import notices
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import ExposedSocket, Limits, SandboxSpec

async def main():
    out = {}
    caught = []
    notices.set_sink(caught.append)
    backend = LocalBackend()
    sock = Path(tempfile.mkdtemp()) / "s.sock"
    async def handle(r, w):
        w.write(b"pong:" + await r.readline()); await w.drain(); w.close()
    server = await asyncio.start_unix_server(handle, path=str(sock))
    sb = await backend.start(SandboxSpec(base="host", limits=Limits(memory_mb=256),
                                         exposed_sockets=(ExposedSocket(host_path=sock, port=18999),)))
    out["warnings"] = list(caught)
    out["dir"] = str(sb.dir)
    r = await sb.exec("id -u; echo hi > /workspace/f; cat /workspace/f; ls -A /root | wc -l;"
                      " grep CapEff /proc/self/status", user="agent")
    out["root_uid"] = (await sb.exec("id -u", user="root")).stdout.strip()
    out["exec"] = [r.exit_code, r.stdout]
    snap = await sb.snapshot()
    await sb.exec("echo more > /workspace/g", user="agent")
    out["diff"] = (await sb.diff(snap)).created
    r = await sb.exec("exec 3<>/dev/tcp/127.0.0.1/18999; echo ping >&3; cat <&3", user="agent",
                      timeout=10)
    out["bridge"] = r.stdout
    r = await sb.exec("(setsid sleep 300 &); sleep 60", timeout=1)
    out["timed_out"] = r.timed_out
    host = socket.socket(); host.bind(("127.0.0.1", 0)); host.listen()
    r = await sb.exec(f"exec 3<>/dev/tcp/127.0.0.1/{host.getsockname()[1]} && echo reached", timeout=10)
    out["net"] = r.stdout
    await sb.stop()
    server.close()
    out["dir_gone"] = not Path(out["dir"]).exists()
    print(json.dumps(out))

asyncio.run(main())
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to an ordinary user for the test")
def test_local_backend_as_ordinary_user() -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv not available")
    # pytest's tmp_path is private to root: the ordinary user needs a traversable directory
    root = Path(tempfile.mkdtemp(prefix="agentmeter-rootless-", dir="/tmp"))
    try:
        _check_rootless(root)
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _check_rootless(root: Path) -> None:
    os.chmod(root, 0o755)
    src = root / "src"
    shutil.copytree(Path(agentmeter.__file__).resolve().parent, src / "agentmeter",
                    ignore=shutil.ignore_patterns("__pycache__", "suites"))
    home = root / "home"
    home.mkdir()
    os.chown(home, 1000, 1000)
    (root / "child.py").write_text(CHILD)
    prefix = Path(sys.base_prefix).resolve()
    py = root / "py"
    py.mkdir()
    exe = Path(sys.executable).resolve().relative_to(prefix)
    purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
    site = purelib.relative_to(prefix) if purelib.is_relative_to(prefix) else None
    pythonpath = [str(src)] + ([str(py / site)] if site else [str(purelib)])
    script = (f"mount --bind {prefix} {py} && exec setpriv --reuid 1000 --regid 1000 --clear-groups "
              f"env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME={home} AGENTMETER_HOME={home}/cache "
              f"PYTHONPATH={':'.join(pythonpath)} {py / exe} {root / 'child.py'}")
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # limits that need cgroups degrade with a printed notice, never silently
    assert any("limits" in w and "not applied" in w for w in out["warnings"]), out["warnings"]
    assert any("ordinary user" in w for w in out["warnings"])
    code, stdout = out["exec"]
    assert code == 0
    uid, content, root_entries, _cap, cap_eff = stdout.split()
    # the agent is an unprivileged uid 1000 without capabilities; host /root hidden
    assert (uid, content, root_entries, cap_eff) == ("1000", "hi", "0", "0000000000000000")
    assert out["root_uid"] == "0"  # root execs are the namespace's root (the invoking user outside)
    assert out["diff"] == ["g"]
    assert out["bridge"] == "pong:ping\n"
    assert out["timed_out"] is True
    assert "reached" not in out["net"]
    assert out["dir_gone"] is True
