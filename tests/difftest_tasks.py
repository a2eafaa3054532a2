"""Small CLI-generation (``difftest``) tasks for tests: an oracle ``greet`` tool and candidates.

The oracle is a stdlib Python program installed in the environment at /opt/oracle/bin (owned by
the oracle's uid, mode 0700). A task's reference solution writes a candidate package into the
workspace from ``solution/ref`` (located with "$(dirname "$0")", as the scripted solver needs).
"""

from __future__ import annotations

import json
from pathlib import Path

ORACLE = '''import argparse
import json
import os


def main():
    p = argparse.ArgumentParser(prog="greet")
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hello")
    h.add_argument("name")
    h.add_argument("--shout", action="store_true")
    c = sub.add_parser("count")
    c.add_argument("file")
    w = sub.add_parser("write")
    w.add_argument("file")
    w.add_argument("text")
    a = p.parse_args()
    if a.cmd == "hello":
        msg = f"Hello, {a.name}!"
        with open("/tmp/greet-last-greeting", "w") as f:  # outside the compared tree
            f.write(msg)
        with open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "greet-tmpdir"), "w") as f:
            f.write(msg)
        print(msg.upper() if a.shout else msg)
    elif a.cmd == "count":
        with open(a.file) as f:
            data = f.read()
        print(json.dumps({"lines": data.count("\\n"), "words": len(data.split())}))
    else:
        with open(a.file, "w") as f:
            f.write(a.text + "\\n")
        print("wrote", a.file)


if __name__ == "__main__":
    main()
'''

PYPROJECT = '''[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.1"

[project.scripts]
{name} = "{module}:main"
'''

DOCKERFILE = """FROM debian:trixie
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv python3-pip \\
    && rm -rf /var/lib/apt/lists/*
RUN mkdir -p /opt/wheelhouse && pip download --no-cache-dir -d /opt/wheelhouse setuptools wheel
COPY oracle/ /opt/oracle/src/
RUN mkdir -p /opt/oracle/bin \\
    && (echo '#!/usr/bin/python3'; cat /opt/oracle/src/greet.py) > /opt/oracle/bin/greet \\
    && chmod 755 /opt/oracle/bin/greet && chown -R 1001:1001 /opt/oracle && chmod 700 /opt/oracle
ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=/opt/wheelhouse PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
"""

TOML = """version = "1.0"
[metadata]
tier = "easy"
category = "test"
tags = ["clitoolbench", "language:python"]
[agent]
sandbox_account = true
timeout_sec = 120.0
[verifier]
kind = "difftest"
timeout_sec = 300.0
[environment]
build_timeout_sec = 600.0
[difftest]
cli_name = "{cli_name}"
oracle_command = "greet"
language = "python"
case_timeout_sec = {case_timeout}
"""


def greet_cases() -> list[dict[str, object]]:
    cases: list[dict[str, object]] = []

    def add(cls: str, command: str, files: dict[str, str] | None = None) -> None:
        cases.append({"id": f"c{len(cases) + 1:03d}", "class": cls, "command": command,
                      "files": files or {}})

    for name in ("ada", "bob", "zoë", "x y"):
        add("greet hello <name>", f"greet hello '{name}'")
        add("greet hello <name> --shout", f"greet hello '{name}' --shout")
    text = {"notes.txt": "one two\nthree\n", "empty.txt": ""}
    for f in ("notes.txt", "empty.txt", "missing.txt"):
        add("greet count <file>", f"greet count {f}", text)
    for f, t in (("out.txt", "hi"), ("sub/none.txt", "x"), ("o2.txt", "a b")):
        add("greet write <file> <text>", f"greet write {f} '{t}'")
    return cases


def make_difftest_task(root: Path, name: str, candidate: str | None = None, *, cli_name: str = "greet",
                       case_timeout: float = 5.0) -> Path:
    """A task whose reference solution installs ``candidate`` (module source, with ``main()``)
    as the package ``cli_name``; ``None``: the oracle's own source."""
    d = root / name
    for sub in ("environment/oracle", "tests", "solution/ref"):
        (d / sub).mkdir(parents=True)
    (d / "task.toml").write_text(TOML.format(cli_name=cli_name, case_timeout=case_timeout))
    (d / "instruction.md").write_text("Build the `greet` command-line tool.\n")
    (d / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (d / "environment" / "oracle" / "greet.py").write_text(ORACLE)
    (d / "tests" / "cases.jsonl").write_text(
        "".join(json.dumps(c) + "\n" for c in greet_cases()))
    module = cli_name.replace("-", "_")
    (d / "solution" / "ref" / f"{module}.py").write_text(candidate or ORACLE)
    (d / "solution" / "ref" / "pyproject.toml").write_text(
        PYPROJECT.format(name=cli_name, module=module))
    (d / "solution" / "solve.sh").write_text(
        '#!/bin/bash\nset -e\ncp -r "$(dirname "$0")/ref/." /app/\n')
    return d
