"""Files an agent reads through its shell tool count as read (the input of AgentMeter's
repeated-read analytics), whatever the CLI: one rule in ``ParsedRun.tool``."""

from __future__ import annotations

import pytest

from agentmeter.agents.cli.spec import ParsedRun, command_text, shell_read_paths


@pytest.mark.parametrize(("command", "paths"), [
    ("cat a.py", ["a.py"]),
    ("cat a b", ["a", "b"]),
    ("head -n 20 src/x.py", ["src/x.py"]),
    ("tail -5 log.txt", ["log.txt"]),
    ("sed -n '1,20p' f.txt", ["f.txt"]),
    ("sed -e s/a/b/ g.txt", ["g.txt"]),
    ("nl -ba file.c", ["file.c"]),
    ("cd /app && cat README.md | head", ["README.md"]),
    ("bash -lc 'cat q.py'", ["q.py"]),
    ("cat f 2>/dev/null", ["f"]),
    ("cat README* *.md 2>/dev/null | head -200", ["README*", "*.md"]),  # as written, unexpanded
    ("cat > out.txt", []),  # a write
    ("cat <<EOF > x\nhi\nEOF", []),
    ("ls -la; grep -n x f", []),
    ("echo 'unterminated", []),
])
def test_shell_read_paths(command: str, paths: list[str]) -> None:
    assert shell_read_paths(command) == paths


def test_every_cli_shape_of_a_shell_call_counts() -> None:
    run = ParsedRun()
    run.tool("exec_command", {"cmd": ["bash", "-lc", "cat app.py"]})       # Codex
    run.tool("Bash", {"command": "head -n 5 app.py", "description": "x"})  # Claude Code
    run.tool("run_shell_command", {"command": "sed -n 1,9p app.py"})       # Qwen Code
    run.tool("bash", "cat notes.md")                                       # mini-swe-agent text
    run.tool("Read", {"file_path": "/w/app.py"}, "/w/app.py")              # a read tool
    run.tool("Write", {"file_path": "/w/out.py", "content": "cat nothing"})  # not a shell call
    assert run.files_read == ["app.py", "app.py", "app.py", "notes.md", "/w/app.py"]
    assert command_text({"cmd": "tail f"}) == "tail f" and command_text(None) == ""
