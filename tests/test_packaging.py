"""The wheel holds exactly the source tree's files: a copy of git's tracked files, with the junk
a developer's tree collects planted in it (bytecode caches, tool caches, editor leftovers), is
built into a wheel whose file list must be git's list of the package's files."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "src/agentmeter/"

#: what a developer's tree collects (relative to the package directory)
JUNK = [
    "__pycache__/cli.cpython-311.pyc",
    "stray.pyc",
    "sandbox/__pycache__/local.cpython-311.opt-1.pyc",
    "tasks/suites/starter/log-level-counts/tests/__pycache__/test_outputs.cpython-311-pytest-8.3.2.pyc",
    "tasks/suites/starter/log-level-counts/environment/old.pyo",
    "tasks/suites/agency/.pytest_cache/v/cache/lastfailed",
    "tasks/.mypy_cache/3.11/cache.json",
    "report/.ruff_cache/0.5.0/123",
    "tasks/suites/.hypothesis/examples/ab/cd",
    "report/html/report.css~",
    "report/html/.report.js.swp",
    "tasks/suites/starter/.DS_Store",
    "metrics/.#agentmeter-table1.toml",
]


def _tracked() -> list[str]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", "pyproject.toml",
                          "README.md", "src"], capture_output=True, text=True, check=True).stdout
    return [f for f in out.split("\0") if f and (ROOT / f).exists()]


def _can_build_offline() -> bool:
    """setuptools with its own bdist_wheel (70.1+), or the wheel package: no build isolation."""
    import setuptools

    major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.mark.slow
def test_the_wheel_holds_exactly_gits_package_files(tmp_path: Path) -> None:
    tracked = _tracked()
    tree = tmp_path / "tree"
    for rel in tracked:
        dst = tree / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dst, follow_symlinks=False)
    for rel in JUNK:
        junk = tree / PACKAGE / rel
        junk.parent.mkdir(parents=True, exist_ok=True)
        junk.write_bytes(b"junk\n")
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"),
           str(tree)]
    if _can_build_offline():
        cmd.insert(4, "--no-build-isolation")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = (tmp_path / "dist").glob("agentmeter-*.whl")
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if ".dist-info/" not in n}
    want = {rel.removeprefix("src/") for rel in tracked if rel.startswith(PACKAGE)}
    assert not shipped - want, f"in the wheel but not in git: {sorted(shipped - want)}"
    assert not want - shipped, f"in git but not in the wheel: {sorted(want - shipped)}"
