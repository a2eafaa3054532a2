"""Small generated tasks for runner tests (native layout). They state no network
(``allow_internet = false``, which an appended ``allowed_hosts`` or ``network_mode`` overrides):
a task that states none gets the run's network default, public."""

from __future__ import annotations

from pathlib import Path

TOML = """version = "1.0"
[metadata]
difficulty = "{tier}"
tier = "{tier}"
category = "test"
[agent]
sandbox_account = true
timeout_sec = {agent_timeout}
[verifier]
timeout_sec = 30.0
[environment]
build_timeout_sec = 300.0
allow_internet = false
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


SCENARIO_TOML = """schema_version = "1.1"
{strategy}
[metadata]
category = "{category}"
[environment]
workdir = "/app"
allow_internet = false
[verifier]
timeout_sec = 30.0
{scenario}
"""


def make_scenario(root: Path, name: str, steps: int = 3, *, max_attempts: int | None = 2,
                  halt_on_fail: bool = False, category: str = "test",
                  solve_sleep: float = 0.0, extra_toml: str = "") -> Path:
    """A scenario (Harbor multi-step task) of ``steps`` steps sharing /app: step k writes
    /app/step<k> containing the previous step's file's content plus one line, so a step passes
    only if the workspace carried the earlier steps' work over."""
    d = root / name
    (d / "environment").mkdir(parents=True)
    (d / "environment" / "Dockerfile").write_text("FROM debian:trixie\nWORKDIR /app\n")
    section = "" if max_attempts is None else (
        f"[scenario]\nmax_attempts = {max_attempts}\nhalt_on_fail = {str(halt_on_fail).lower()}\n")
    entries = "".join(f'[[steps]]\nname = "s{k}"\n' for k in range(1, steps + 1))
    (d / "task.toml").write_text(SCENARIO_TOML.format(strategy="", category=category,
                                                      scenario=section) + extra_toml + entries)
    for k in range(1, steps + 1):
        s = d / "steps" / f"s{k}"
        (s / "tests").mkdir(parents=True)
        (s / "solution").mkdir()
        prev = f"cat /app/step{k - 1} > /app/step{k}; " if k > 1 else ""
        (s / "instruction.md").write_text(f"Step {k}: write /app/step{k}.\n")
        (s / "solution" / "solve.sh").write_text(
            f"#!/bin/bash\nsleep {solve_sleep}\n{prev}echo line{k} >> /app/step{k}\n")
        expected = "".join(f"line{i}\\n" for i in range(1, k + 1))
        (s / "tests" / "test.sh").write_text(
            "#!/bin/bash\nmkdir -p /logs/verifier\n"
            f'if [ "$(cat /app/step{k} 2>/dev/null)" = "$(printf "{expected}")" ]; '
            "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
    return d
