"""The host installer (sandbox/hosttools.py): concurrent agentmeter processes that need the same
missing tool make one install between them, and a failed install says why. apt-get is a fake
on PATH (it logs its calls and "installs" the tool by writing it), so nothing real is installed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentmeter.sandbox import hosttools
from agentmeter.sandbox.spec import SandboxError

FAKE_APT = """\
#!/bin/sh
echo "$*" >> "$FAKE_APT_LOG"
case " $* " in
*" install "*)
  if [ -n "$FAKE_APT_FAIL" ]; then
    echo "Reading package lists..."
    for last; do :; done
    echo "E: Unable to locate package $last" >&2
    exit 100
  fi
  sleep 0.5
  printf '#!/bin/sh\\n' > "$FAKE_APT_BIN/faketool"
  chmod 755 "$FAKE_APT_BIN/faketool" ;;
esac
exit 0
"""

#: one agentmeter process needing the tool: waits for the go file, then ensure_tools
CHILD = """\
import sys, time
from pathlib import Path
from agentmeter.sandbox import hosttools
hosttools.LOCK_PATH = Path(sys.argv[1])
hosttools.can_install = lambda: True
Path(sys.argv[2]).touch()
while not Path(sys.argv[3]).exists():
    time.sleep(0.01)
hosttools.ensure_tools({"faketool": "fake-pkg"}, "the test", log=None)
"""


@pytest.fixture
def fake_apt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bin directory first on PATH with the fake apt-get; its calls go to apt.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(FAKE_APT)
    (bin_dir / "apt-get").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_APT_LOG", str(tmp_path / "apt.log"))
    monkeypatch.setenv("FAKE_APT_BIN", str(bin_dir))
    monkeypatch.setattr(hosttools, "LOCK_PATH", tmp_path / "apt.lock")
    monkeypatch.setattr(hosttools, "can_install", lambda: True)
    return tmp_path


def _calls(tmp: Path) -> list[str]:
    log = tmp / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


def test_concurrent_processes_install_a_missing_tool_once(fake_apt: Path) -> None:
    src = Path(__file__).resolve().parents[1] / "src"
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    go = fake_apt / "go"
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(fake_apt / "apt.lock"),
                               str(fake_apt / f"ready{i}"), str(go)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(4)]
    deadline = time.monotonic() + 30
    while not all((fake_apt / f"ready{i}").exists() for i in range(4)):
        assert time.monotonic() < deadline, "the processes did not start"
        time.sleep(0.01)
    go.touch()  # all four look for the tool at once: none has it
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0, out
    installs = [c for c in _calls(fake_apt) if " install " in f" {c} "]
    assert len(installs) == 1, _calls(fake_apt)
    assert installs[0].startswith("-oDPkg::Lock::Timeout=300 install"), installs
    assert installs[0].endswith("fake-pkg")


def test_a_failed_install_names_apts_status_and_its_cause(fake_apt: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_APT_FAIL", "1")
    with pytest.raises(SandboxError) as e:
        hosttools.ensure_tools({"faketool": "fake-pkg"}, "the test", log=None)
    text = str(e.value)
    assert "installing fake-pkg (needed for the test) failed" in text, text
    assert "exited with status 100" in text, text
    assert "E: Unable to locate package fake-pkg" in text, text


def test_a_tool_found_by_its_own_finder_is_not_installed(fake_apt: Path) -> None:
    hosttools.ensure_tools({"elsewhere": "some-pkg"}, "the test", log=None,
                           find=lambda cmd: f"/opt/{cmd}")
    assert _calls(fake_apt) == []


def test_without_root_it_says_what_to_install(fake_apt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hosttools, "can_install", lambda: False)
    with pytest.raises(SandboxError, match=r"install with: sudo apt-get install fake-pkg"):
        hosttools.ensure_tools({"faketool": "fake-pkg"}, "the test", log=None)
    assert _calls(fake_apt) == []

