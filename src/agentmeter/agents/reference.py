"""Reference agents: ``oracle`` runs the task's reference solution, ``nop`` does nothing.

``tasks check`` uses them to find broken tasks (oracle fails) and trivial ones (nop passes).
"""

from __future__ import annotations

from agentmeter.agents.base import AgentContext, AgentRun
from agentmeter.sandbox.spec import AGENT_USER, LayerSpec
from agentmeter.tasks.models import SOLUTION_MOUNT


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
        return AgentRun(exit_code=r.exit_code, timed_out=r.timed_out, command_s=r.duration_s,
                        artifacts={"oracle.log": (log, "agent_log")})


class NopAgent:
    name = "nop"
    version: str | None = None
    uses_model = False

    def layers(self) -> list[LayerSpec]:
        return []

    async def run(self, ctx: AgentContext) -> AgentRun:
        return AgentRun(exit_code=0)
