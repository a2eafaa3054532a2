"""Benchmark and acceptance check: Harbor's own example tasks with oracle and nop.

Runs the corpus (``../shared/corpora/harbor-examples``, unmodified; its README) the way the
corpus README says: its top-level tasks and the suites ``network-policy-matrix/static``,
``network-policy-matrix/dynamic`` and ``verifier-mode-matrix``, with the agents ``oracle``
and ``nop`` on the chosen backend. Each trial (a multi-step task has one per step) gives an
outcome (its status: passed, failed, agent_error, …) and a reason (its error); each task the
run cannot load or run is ``skipped`` with the loader's reason. Both are compared with the
expected table ``benchmarks/harbor_corpus_expected.json``:

- ``tasks``: ``{task id: {agent: {"outcome": …, "reason": regex or null}}}``, what every
  backend gives; ``backends.<name>``: the entries a backend gives differently (with why);
- a reason regex must be found in the trial's error (``re.search``; null: no error expected).

Prints the differences, then one JSON line (``differences`` lists them), and exits 1 when there
is one. ``--write-expected`` writes the table from this run instead (reasons as their first
line up to its details, escaped, numbers as ``[\\d.]+``), to be reviewed before it is committed:
on the local backend ``tasks``, on another backend only its ``backends.<name>`` section (the
entries that differ from ``tasks``).

Too slow for the suite (tens of minutes; the docker backend builds every image): run it by hand
or in a nightly job. Usage:

    python benchmarks/harbor_corpus.py [--backend local|docker] [--corpus PATH]
        [--concurrency N] [--store DIR [--reuse]] [--write-expected]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.store.db import Store

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "harbor_corpus_expected.json"
CORPUS = HERE.parents[1] / "shared" / "corpora" / "harbor-examples"
#: the nested suites the corpus README runs besides the top level
NESTED = ("network-policy-matrix/static", "network-policy-matrix/dynamic", "verifier-mode-matrix")
AGENTS = ("oracle", "nop")

Outcomes = dict[str, dict[str, dict[str, str | None]]]


def _reason(error: str | None, corpus: Path) -> str | None:
    if not error:
        return None
    return error.replace(str(corpus), "{corpus}")


async def run_corpus(corpus: Path, backend: str, concurrency: int, store_dir: Path,
                     reuse: bool = False) -> Outcomes:
    """``{task id: {agent or "*": {"outcome": …, "reason": …}}}`` of one run (``reuse``: the
    store's latest run instead of a new one)."""
    suites = [str(corpus), *(str(corpus / n) for n in NESTED)]
    prepared = prepare(RunRequest(suites=suites, agents=list(AGENTS), backend=backend,
                                  concurrency=concurrency))
    store = Store.open(store_dir)
    if reuse:
        rid = store.list_runs(limit=1)[0].id
    else:
        rid, _ = await run(store, prepared)
    agent_of = {c.id: c.agent.name for c in store.run_configs(rid)}
    out: Outcomes = {}
    for t in store.latest_completed_trials(rid):
        out.setdefault(t.task_id, {})[agent_of[t.config_id]] = {
            "outcome": t.status.value, "reason": _reason(t.error, corpus)}
    for s in prepared.skipped:
        out.setdefault(s.id, {})["*"] = {"outcome": "skipped",
                                         "reason": _reason("; ".join(s.problems), corpus)}
    return out


def expected_for(table: dict[str, Any], backend: str) -> Outcomes:
    want: Outcomes = {k: dict(v) for k, v in table["tasks"].items()}
    for task, agents in table.get("backends", {}).get(backend, {}).items():
        # a backend's entry for a task is the task's whole entry there (a task skipped on one
        # backend may run on another: islo-network-policy-demo)
        want[task] = {agent: entry for agent, entry in agents.items() if agent != "why"}
    return want


def differences(got: Outcomes, want: Outcomes) -> list[str]:
    diffs = []
    for task in sorted(set(got) | set(want)):
        g, w = got.get(task, {}), want.get(task, {})
        for agent in sorted(set(g) | set(w)):
            if agent == "why":
                continue
            ge, we = g.get(agent), w.get(agent)
            if ge is None or we is None:
                diffs.append(f"{task} [{agent}]: {'not expected' if we is None else 'not run'}"
                             f" ({(ge or we or {}).get('outcome')})")
                continue
            if ge["outcome"] != we["outcome"]:
                diffs.append(f"{task} [{agent}]: {ge['outcome']}, expected {we['outcome']}: "
                             f"{(ge['reason'] or '')[:300]}")
            elif we["reason"] is None and ge["reason"]:
                diffs.append(f"{task} [{agent}]: unexpected reason {ge['reason'][:300]!r}")
            elif we["reason"] is not None and not re.search(we["reason"], ge["reason"] or "",
                                                            re.DOTALL):
                diffs.append(f"{task} [{agent}]: reason {(ge['reason'] or '')[:300]!r} does not "
                             f"match {we['reason']!r}")
    return diffs


def _pattern(reason: str | None) -> str | None:
    if reason is None:
        return None
    first = reason.splitlines()[0][:200]
    cut = first.find(" (", 20)  # the details after it vary by machine (resolver errors, …)
    first = first[:cut] if cut > 0 else first
    return re.sub(r"\d+(?:\\\.\d+)*", r"[\\d.]+", re.escape(first).replace(r"\ ", " "))


def summary(got: Outcomes) -> dict[str, Any]:
    """Counts: trials per agent and outcome, and whole tasks (every step) the oracle passed."""
    counts: dict[str, dict[str, int]] = {}
    tasks: dict[str, list[bool]] = {}
    for task, agents in got.items():
        for agent, e in agents.items():
            outcome = str(e["outcome"])
            counts.setdefault(agent, {}).setdefault(outcome, 0)
            counts[agent][outcome] += 1
            if agent == "oracle":
                tasks.setdefault(task.split(".")[0], []).append(outcome == TrialStatus.PASSED.value)
    return {"trials": counts,
            "oracle_whole_tasks_passed": sum(all(v) for v in tasks.values()),
            "oracle_whole_tasks": len(tasks)}


def written_table(got: Outcomes, old: dict[str, Any], backend: str) -> dict[str, Any]:
    """The expected table from this run: on the local backend (or with no table yet) ``tasks``
    (the other backends' sections kept); on another backend only ``backends.<backend>``: the
    entries this run gives differently from ``tasks`` (each task's ``why`` kept)."""
    written: Outcomes = {t: {a: {"outcome": e["outcome"], "reason": _pattern(e["reason"])}
                             for a, e in sorted(agents.items())}
                         for t, agents in sorted(got.items())}
    backends: dict[str, Any] = dict(old.get("backends", {}))
    if backend == "local" or not old.get("tasks"):
        return {"tasks": written, "backends": backends}
    before = backends.get(backend, {})
    delta: dict[str, Any] = {}
    for task, agents in written.items():
        base = old["tasks"].get(task, {})
        for agent, entry in agents.items():
            want = {task: {agent: base[agent]} if agent in base else {}}
            if differences({task: {agent: got[task][agent]}}, want):
                delta.setdefault(task, {})[agent] = entry
        if task in delta and "why" in before.get(task, {}):
            delta[task]["why"] = before[task]["why"]
    backends[backend] = delta
    return {"tasks": old["tasks"], "backends": backends}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="local")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--store", type=Path, help="runs directory (default: a temporary one)")
    ap.add_argument("--reuse", action="store_true",
                    help="compare the latest run in --store instead of running the corpus")
    ap.add_argument("--expected", type=Path, default=EXPECTED)
    ap.add_argument("--write-expected", action="store_true",
                    help="write the expected table from this run (every backend's entries)")
    args = ap.parse_args()
    if not (args.corpus / "hello-world").is_dir():
        print(f"no corpus at {args.corpus}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="am-harbor-corpus-") as tmp:
        got = asyncio.run(run_corpus(args.corpus.resolve(), args.backend, args.concurrency,
                                     args.store or Path(tmp) / "runs", args.reuse and
                                     args.store is not None))
    seconds = time.monotonic() - t0
    result: dict[str, Any] = {"benchmark": "harbor_corpus", "backend": args.backend,
                              "seconds": round(seconds, 1), **summary(got)}
    if args.write_expected:
        old = json.loads(args.expected.read_text()) if args.expected.exists() else {}
        table = written_table(got, old, args.backend)
        args.expected.write_text(json.dumps(table, indent=1) + "\n")
        result["written"] = str(args.expected)
        diffs: list[str] = []
    else:
        table = json.loads(args.expected.read_text())
        diffs = differences(got, expected_for(table, args.backend))
        for d in diffs:
            print(d)
    result["differences"] = diffs
    result["per_task"] = {t: {a: e["outcome"] for a, e in agents.items()}
                          for t, agents in sorted(got.items())}
    print(json.dumps(result))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
