"""Reference agents: ``oracle`` runs the task's reference solution, ``nop`` does nothing.

``tasks check`` uses them to find broken tasks (oracle fails) and trivial ones (nop passes).
"""

from __future__ import annotations

import base64
import shlex

from agentmeter.agents.base import AgentContext, AgentRun
from agentmeter.sandbox.spec import AGENT_USER, LayerSpec
from agentmeter.tasks.models import SOLUTION_MOUNT, Task

_B64_EOF = "AGENTMETER_B64_EOF"


def replay_script(task: Task) -> str | None:
    """The reference solution as one shell script, for the scripted solver to run through an
    agent's own shell tool: solve.sh itself, or, when solution/ holds more files (a reference
    implementation, say), a script that recreates them in a temporary directory and runs its
    solve.sh there (which must find its files through "$(dirname "$0")")."""
    files = task.solution_files()
    if task.solution_script is None or not task.solution_script.is_file():
        return None
    if len(files) <= 1:
        return task.solution_script.read_text()
    lines = ["set -e", 'D="$(mktemp -d /tmp/agentmeter-solution.XXXXXX)"']
    for rel, host in sorted(files.items()):
        target = shlex.quote(rel)
        lines.append(f'mkdir -p "$D/$(dirname {target})"')
        lines.append(f'base64 -d > "$D/"{target} <<\'{_B64_EOF}\'')
        lines.append(base64.encodebytes(host.read_bytes()).decode().rstrip("\n"))
        lines.append(_B64_EOF)
        if host.stat().st_mode & 0o111:
            lines.append(f'chmod +x "$D/"{target}')
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(task.solution_env.items()))
    script = task.solution_script.relative_to(task.solution_dir or task.solution_script.parent)
    lines.append(f'rc=0; {env + " " if env else ""}bash "$D/{script.as_posix()}" || rc=$?')
    lines.append('rm -rf "$D"; exit $rc')
    return "\n".join(lines) + "\n"


class OracleAgent:
    name = "oracle"
    version: str | None = None
    uses_model = False

    def layers(self) -> list[LayerSpec]:
        return []

    async def run(self, ctx: AgentContext) -> AgentRun:
        task = ctx.task
        if task.solution_command is None:
            return AgentRun(error=f"task {task.id} has no reference solution")
        for rel, host in task.solution_files().items():
            await ctx.sandbox.write_file(f"{SOLUTION_MOUNT}/{rel}", host.read_bytes(), mode=0o755)
        r = await ctx.sandbox.exec(task.solution_command, user=AGENT_USER, env=task.solution_env,
                                   timeout=ctx.timeout_s)
        log = ctx.logs_dir / "oracle.log"
        log.write_text(f"$ {task.solution_command}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}\n"
                       f"--- exit {r.exit_code}{' (timed out)' if r.timed_out else ''}\n")
        last = [ln for ln in (r.stderr or r.stdout).splitlines() if ln.strip()]
        said = f"solve.sh exited {r.exit_code}: {last[-1][:300] if last else '(no output)'}"
        return AgentRun(exit_code=r.exit_code, timed_out=r.timed_out, command_s=r.duration_s,
                        final_message=said if r.exit_code else None,
                        artifacts={"oracle.log": (log, "agent_log")})


class NopAgent:
    name = "nop"
    version: str | None = None
    uses_model = False

    def layers(self) -> list[LayerSpec]:
        return []

    async def run(self, ctx: AgentContext) -> AgentRun:
        return AgentRun(exit_code=0)
