"""Small generated tasks for runner tests (native layout)."""

from __future__ import annotations

from pathlib import Path

TOML = """version = "1.0"
[metadata]
difficulty = "{tier}"
tier = "{tier}"
category = "test"
[agent]
timeout_sec = {agent_timeout}
[verifier]
timeout_sec = 30.0
[environment]
build_timeout_sec = 300.0
"""


def make_task(root: Path, name: str, *, solve: str = "echo done > /app/done",
              test: str | None = None, agent_timeout: float = 60.0, tier: str = "easy",
              dockerfile: str = "FROM debian:trixie\nWORKDIR /app\n") -> Path:
    d = root / name
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "solution").mkdir()
    (d / "task.toml").write_text(TOML.format(tier=tier, agent_timeout=agent_timeout))
    (d / "instruction.md").write_text(f"Task {name}: create /app/done.\n")
    (d / "environment" / "Dockerfile").write_text(dockerfile)
    (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}\n")
    (d / "tests" / "test.sh").write_text(
        test or "#!/bin/bash\nmkdir -p /logs/verifier\n"
        "if [ -f /app/done ]; then echo 1 > /logs/verifier/reward.txt; "
        "else echo 0 > /logs/verifier/reward.txt; fi\n")
    return d
