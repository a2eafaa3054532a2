"""``agentmeter difftest new``: a complete CLI-generation task directory for a new oracle (Python
candidates), so nobody copies a Dockerfile by hand.

Written: ``task.toml`` (``[difftest]``, metadata with the oracle's source), ``environment/
Dockerfile`` (the clitools toolchain and offline wheelhouse, the oracle's account, the oracle
installed under ``/opt/oracle`` out of every PATH), ``instruction.md`` (a placeholder that
``difftest synth --prompt`` replaces), an empty ``tests/`` and ``solution/solve.sh``. The oracle
comes from a directory (a Python project: copied into ``environment/oracle`` and, as the
reference solution, into ``solution/<command>``), from PyPI (installed at image build; the
reference is the sdist placed in ``solution/``) or from Debian (``apt-get``; no reference can be
derived: solve.sh says so). A PyPI release that ships no sdist (only a pure-Python wheel) gets its
reference from the wheel: its modules with a ``pyproject.toml`` rebuilt from the wheel's metadata
and entry points (``reference_from_wheel``). Then: ``difftest synth TASK --from-help`` drafts the
schema, whose placeholder values are listed to edit.
"""

from __future__ import annotations

import re
import shutil
import zipfile
from email.parser import Parser
from importlib import resources
from pathlib import Path
from typing import Literal

Source = Literal["dir", "pypi", "apt"]
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
#: the line ending the shared preamble of the packaged clitools Dockerfiles
PREAMBLE_END = "useradd -u 1001"


class ScaffoldError(ValueError):
    """The task cannot be made (one line)."""


def preamble() -> str:
    """Toolchain, wheelhouse and the oracle's account: the packaged tree task's Dockerfile up to
    the account's line (the one copy of it)."""
    text = (resources.files("agentmeter.tasks.suites") / "clitools" / "tree" / "environment"
            / "Dockerfile").read_text(encoding="utf-8")
    lines = []
    for line in text.splitlines():
        lines.append(line)
        if PREAMBLE_END in line:
            return "\n".join(lines) + "\n"
    raise ScaffoldError("the packaged clitools Dockerfile has no oracle account line")


def oracle_block(source: Source, spec: str, command: str) -> str:
    own = "chown -R 1001:1001 /opt/oracle && chmod 0700 /opt/oracle"
    if source == "apt":
        return (f"# the oracle: Debian's {spec}, moved out of every PATH into /opt/oracle/bin\n"
                "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                f"--no-install-recommends {spec} && rm -rf /var/lib/apt/lists/* && "
                f"mv \"$(command -v {command})\" /opt/oracle/bin/{command} && {own}\n")
    if source == "pypi":
        return (f"# the oracle: {spec} from the package index (at image build only; trials are "
                "offline), in a venv under /opt/oracle\n"
                "RUN python3 -m venv /opt/oracle/venv && env -u PIP_NO_INDEX -u PIP_FIND_LINKS "
                f"/opt/oracle/venv/bin/pip install --no-cache-dir -q '{spec}' && "
                f"ln -s ../venv/bin/{command} /opt/oracle/bin/{command} && {own}\n")
    return ("# the oracle: its source (environment/oracle), installed with the candidate's own "
            "command (pip install .; offline, from the wheelhouse) into a venv under "
            "/opt/oracle\n"
            "COPY oracle/ /opt/oracle/src/\n"
            "RUN python3 -m venv /opt/oracle/venv && cd /opt/oracle/src && "
            "/opt/oracle/venv/bin/pip install "
            f"--no-cache-dir -q . && ln -s ../venv/bin/{command} /opt/oracle/bin/{command} && "
            f"rm -rf /opt/oracle/src/build /opt/oracle/src/*.egg-info && {own}\n")


def task_toml(name: str, source: Source, spec: str, command: str, tier: str,
              category: str) -> str:
    return f'''version = "1.0"

[metadata]
author_name = "agentmeter difftest new"
difficulty = "{tier}"
tier = "{tier}"
category = "{category}"
tags = ["clitoolbench", "language:python"]
source = "agentmeter-difftest-new"
cli_name = "{command}"
oracle_cli_name = "{command}"
oracle_source = "{source}:{spec}"

[agent]
sandbox_account = true
timeout_sec = 3600.0

[verifier]
kind = "difftest"
timeout_sec = 1800.0

[environment]
network_mode = "no-network"  # stated: a task that states none is public (Harbor's default)
build_timeout_sec = 1800.0
cpus = 1
memory_mb = 2048
storage_mb = 4096

[difftest]
cli_name = "{command}"
language = "python"
case_timeout_sec = 10
'''


SOLVE_COPY = '''#!/bin/bash
# reference candidate: the oracle's own source, copied into the workspace
set -euo pipefail
src="$(cd "$(dirname "$0")" && pwd)/{command}"
cd /app
cp -rL "$src"/. /app/
'''
SOLVE_SDIST = '''#!/bin/bash
# reference candidate: the oracle's sdist (solution/*.tar.gz), unpacked into the workspace
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
sdist=$(ls "$here"/*.tar.gz 2>/dev/null | head -n 1 || true)
if [ -z "$sdist" ]; then
  echo "no sdist in solution/: put the oracle's source archive there" >&2
  exit 1
fi
cd /app
tar -xzf "$sdist" --strip-components=1 -C /app
'''
SOLVE_NONE = '''#!/bin/bash
# no reference candidate can be derived from a Debian package: write one (a reimplementation
# under solution/{command}, installable with `pip install .`) and copy it into /app here
echo "no reference solution yet: see solution/solve.sh" >&2
exit 1
'''
INSTRUCTION = ("Placeholder: `agentmeter difftest synth TASK --prompt` writes the prompt (the "
               "tool's overview, its --help text and one sample per command class).\n")


def default_command(source: Source, spec: str) -> str:
    """The oracle's command when none is given: the directory's or the package's name."""
    return Path(spec).name if source == "dir" else re.split(r"[=<>!~\[ ]", spec, maxsplit=1)[0]


def scaffold(parent: Path, name: str, source: Source, spec: str, command: str | None = None,
             tier: str = "easy", category: str = "utility") -> Path:
    """Write the task ``parent/name``; returns its directory. ``spec``: the PyPI requirement,
    the Debian package, or the oracle project's directory."""
    command = command or default_command(source, spec)
    for label, value in (("task name", name), ("command", command)):
        if not NAME.match(value):
            raise ScaffoldError(f"{label} {value!r}: letters, digits and . _ + - only")
    if tier not in ("easy", "medium", "hard"):
        raise ScaffoldError(f"tier {tier!r}: use easy, medium or hard")
    if source == "dir":
        project = Path(spec)
        if not ((project / "pyproject.toml").is_file() or (project / "setup.py").is_file()):
            raise ScaffoldError(f"{project}: not a Python project (no pyproject.toml or "
                                "setup.py)")
    elif not spec.strip() or any(c in spec for c in "'\"\n;&|$`"):
        raise ScaffoldError(f"{source} package {spec!r}: a plain package name or requirement")
    task = parent / name
    if task.exists():
        raise ScaffoldError(f"{task} exists: choose another name or remove it")
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "environment" / "Dockerfile").write_text(
        preamble() + oracle_block(source, spec, command) + "WORKDIR /app\n"
        "RUN chown 1000:1000 /app\n", encoding="utf-8")
    (task / "task.toml").write_text(task_toml(name, source, spec, command, tier, category),
                                    encoding="utf-8")
    (task / "instruction.md").write_text(INSTRUCTION, encoding="utf-8")
    ignore = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "build", "dist",
                                    ".venv", "venv", "node_modules")
    if source == "dir":
        shutil.copytree(spec, task / "environment" / "oracle", ignore=ignore)
        shutil.copytree(spec, task / "solution" / command, ignore=ignore)
        solve = SOLVE_COPY
    else:
        solve = SOLVE_SDIST if source == "pypi" else SOLVE_NONE
    (task / "solution" / "solve.sh").write_text(solve.replace("{command}", command),
                                                encoding="utf-8")
    (task / "solution" / "solve.sh").chmod(0o755)
    return task


def reference_from_wheel(wheel: Path, task: Path, command: str) -> Path:
    """The reference candidate from a pure-Python wheel (a release without an sdist): the
    wheel's files but its ``.dist-info`` in ``solution/<command>``, a ``pyproject.toml``
    (setuptools, from the wheel's name, version, requirements and console scripts) and the copy
    solve.sh. Returns the candidate's directory."""
    if not wheel.name.endswith("-none-any.whl"):
        raise ScaffoldError(f"{wheel.name}: not a pure-Python wheel (no source to derive a "
                            "reference from)")
    dest = task / "solution" / command
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next((n.split("/", 1)[0] for n in names
                     if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
        if info is None:
            raise ScaffoldError(f"{wheel.name}: no .dist-info/METADATA")
        meta = Parser().parsestr(z.read(f"{info}/METADATA").decode("utf-8", "replace"))
        entry = (z.read(f"{info}/entry_points.txt").decode("utf-8", "replace")
                 if f"{info}/entry_points.txt" in names else "")
        for n in names:
            top = n.split("/", 1)[0]
            if (top == info or top.endswith(".data") or n.endswith("/") or n.startswith("/")
                    or ".." in n.split("/")):  # an absolute name: dest / n is that path
                continue
            target = dest / n
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(n))
    scripts = _console_scripts(entry)
    if not scripts:
        raise ScaffoldError(f"{wheel.name}: the wheel declares no console script")
    packages = sorted(".".join(p.parent.relative_to(dest).parts) for p in dest.rglob("__init__.py"))
    modules = sorted(p.stem for p in dest.glob("*.py"))
    requires = [r for r in meta.get_all("Requires-Dist") or [] if "extra" not in r]
    lines = ["[build-system]", 'requires = ["setuptools"]',
             'build-backend = "setuptools.build_meta"', "", "[project]",
             f"name = {_q(meta.get('Name') or command)}",
             f"version = {_q(meta.get('Version') or '0')}",
             f"dependencies = [{', '.join(_q(r) for r in requires)}]", "",
             "[project.scripts]", *(f"{_q(k)} = {_q(v)}" for k, v in scripts.items()), "",
             "[tool.setuptools]", f"packages = [{', '.join(_q(p) for p in packages)}]",
             f"py-modules = [{', '.join(_q(m) for m in modules)}]", "",
             "[tool.setuptools.package-data]", '"*" = ["*"]', ""]
    (dest / "pyproject.toml").write_text("\n".join(lines), encoding="utf-8")
    solve = task / "solution" / "solve.sh"
    solve.write_text(SOLVE_COPY.replace("{command}", command), encoding="utf-8")
    solve.chmod(0o755)
    return dest


def _console_scripts(entry_points: str) -> dict[str, str]:
    out: dict[str, str] = {}
    section = ""
    for line in entry_points.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]").strip()
        elif "=" in line and section == "console_scripts":
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def _q(text: str) -> str:
    """A TOML basic string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
