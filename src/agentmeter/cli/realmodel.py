"""``agentmeter demo --real-model``: the native agent and mini-swe-agent against a real small
model (``local/smollm2-135m``, a llama.cpp server agentmeter starts itself), every call's
metered usage set beside the server's own counts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentmeter.runner.session import RunRequest
    from agentmeter.store.db import Store

MODEL = "local/smollm2-135m"
TASKS = ["log-level-counts"]
#: the native agent kept short: a 135M model rarely calls a tool well, a few turns show it
NATIVE_OPTIONS: dict[str, Any] = {"max_turns": 3, "max_tokens": 48, "temperature": 0,
                                  "context_window": 8192}
#: mini-swe-agent's own limits, so that a model that never submits ends after one or two calls:
#: a reply without a bash call ends the run at once, a second step is the last
MINI_LIMITS = ["-c", "agent.step_limit=2", "-c", "agent.max_consecutive_format_errors=1",
               "-c", "model.model_kwargs.max_tokens=24", "-c", "model.model_kwargs.temperature=0"]


def missing() -> str | None:
    """Why the real-model step cannot run here (with how to fix it), or None."""
    from agentmeter.gateway import localmodels

    try:
        localmodels.find(MODEL.split("/", 1)[1])
    except localmodels.LocalModelError as e:
        return f"{e} (the local-model extra: docs/local-models.md)"
    return None


def request(concurrency: int, clis: bool) -> RunRequest:
    """The demo's real-model run: the native agent, and mini-swe-agent unless ``clis`` is off."""
    from agentmeter.runner.session import RunRequest

    agents = ["native", "mini-swe-agent"] if clis else ["native"]
    return RunRequest(suites=["starter"], task_ids=TASKS, agents=agents, models=[MODEL],
                      record_bodies=True, concurrency=concurrency,
                      agent_options={"native": NATIVE_OPTIONS,
                                     "mini-swe-agent": {"extra_args": MINI_LIMITS}})


@dataclass(frozen=True)
class CallCounts:
    """One model call: what the gateway metered and what the server's own reply said."""

    trial_id: str
    label: str  #: the trial's configuration
    task_id: str
    seq: int
    metered: tuple[int | None, int | None]  #: (input, output)
    server: tuple[int, int] | None  #: (prompt_tokens, completion_tokens); None: not in the body

    @property
    def equal(self) -> bool:
        return self.server is not None and self.metered == self.server


def compare(store: Store, run_id: str) -> list[CallCounts]:
    """Every model call of the run's trials beside the server's usage in the response body the
    gateway recorded (the server's own bytes for a Chat call that was not streamed)."""
    out = []
    bodies = store.run_dir(run_id) / "bodies"
    labels = {c.id: c.label for c in store.run_configs(run_id)}
    for trial in store.latest_completed_trials(run_id):
        for call in store.model_calls(run_id, trial.id):
            server = None
            path = bodies / call.trial_id / f"{call.seq:05d}-response.json"
            try:
                usage = json.loads(path.read_text()).get("usage")
                server = (int(usage["prompt_tokens"]), int(usage["completion_tokens"]))
            except (OSError, ValueError, TypeError, KeyError, AttributeError):
                pass
            out.append(CallCounts(trial.id, labels.get(trial.config_id, "?"), trial.task_id,
                                  call.seq, (call.usage.input, call.usage.output), server))
    return out


def print_comparison(store: Store, run_id: str) -> None:
    from rich.table import Table

    from agentmeter.cli.common import console

    rows = compare(store, run_id)
    table = Table(title=f"{MODEL}: metered by the gateway vs the server's own counts")
    for col in ("configuration", "task", "call", "metered in/out", "server in/out", ""):
        table.add_column(col)
    for r in rows:
        server = f"{r.server[0]}/{r.server[1]}" if r.server else "n/a"
        table.add_row(r.label, r.task_id, str(r.seq), f"{r.metered[0]}/{r.metered[1]}", server,
                      "equal" if r.equal else "[red]differ[/red]")
    console.print(table)
    same = sum(r.equal for r in rows)
    console.print(f"{same} of {len(rows)} calls metered exactly as the server counted")
