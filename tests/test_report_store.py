"""Fixture stores for the report tests, built through the Store API with realistic data, and the
report's data-level checks (no browser): a grid of configurations × tiered tasks with scripted
test-double models, an unpriced model, every failure status, retried infra_invalid tries, model
calls, tool calls and artifacts (text, an oversized log, a screenshot), plus stores of missing data.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentmeter.records import (
    AgentSpec,
    ArtifactRecord,
    ConfigRecord,
    ModelCallRecord,
    ModelSpec,
    RunRecord,
    TaskRecord,
    TokenUsage,
    TrialRecord,
    TrialStatus,
)
from agentmeter.report.html import collect, render_report_html
from agentmeter.store.db import Store

S = TrialStatus
NO_MODEL = "none"  # the model of agents that use none (runner.plan)
T0 = datetime(2026, 6, 4, 9, 0, tzinfo=UTC)
TIERS = ["easy"] * 4 + ["medium"] * 4 + ["hard"] * 4
TASKS = [f"{t[0]}{i % 4 + 1}-{name}" for i, (t, name) in enumerate(zip(TIERS, [
    "count-lines", "fix-typo", "csv-sum", "rename-files", "fix-pagination", "log-levels",
    "json-merge", "port-script", "cache-layer", "sql-migrate", "race-fix", "cli-tool"],
    strict=True))]
TOOLS = {"native": ["bash", "read_file", "write_file"], "codex": ["shell", "apply_patch"],
         "claude-code": ["Bash", "Read", "Edit", "Write"], "oracle": [], "nop": []}
#: (agent, model, skill, USD per 1k tokens or None when the model has no price)
GRID = [("oracle", NO_MODEL, 1.0, None), ("nop", NO_MODEL, 0.0, None),
        ("native", "scripted/solver", 0.95, 0.001), ("native", "scripted/quitter", 0.05, 0.001),
        ("codex", "openai/gpt-5", 0.8, 0.01), ("native", "openai/gpt-5", 0.6, 0.01),
        ("claude-code", "anthropic/claude-sonnet-4", 0.7, 0.015),
        ("native", "vllm/local-qwen", 0.4, None)]
FAILS = [S.FAILED, S.FAILED, S.AGENT_ERROR, S.TIMEOUT, S.BUDGET_EXCEEDED]
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360f80f0000010101005f1d0b5f0000000049454e44ae426082")


def config(agent: str, model: str) -> ConfigRecord:
    return ConfigRecord.of(AgentSpec(name=agent), ModelSpec(name=model,
                                                         price_key=None if model == NO_MODEL
                                                         else model))


def _artifact(store: Store, rec: TrialRecord, name: str, kind: str, data: bytes) -> None:
    d = store.artifact_dir(rec.run_id, rec.id, rec.try_number)
    path = d / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    rel = path.relative_to(store.run_dir(rec.run_id)).as_posix()
    store.add_artifact(rec.run_id, ArtifactRecord(trial_id=rec.id, name=name, kind=kind,  # type: ignore[arg-type]
                                                  relpath=rel, size=len(data)), rec.try_number)


def _save(store: Store, rec: TrialRecord, price: float | None, model: str, rng: random.Random,
          agent: str, artifacts: bool = True) -> None:
    """Model calls, usage, cost and artifacts of one try, then the try itself."""
    n_calls = 0 if model == NO_MODEL or rec.status is S.INFRA_INVALID and rec.try_number else \
        rng.randint(1, 4)
    usage, calls = TokenUsage(), []
    for seq in range(n_calls):
        u = TokenUsage(input=rng.randint(800, 6000), output=rng.randint(50, 900),
                       cache_creation=rng.choice([None, 0, 400]), cache_read=rng.randint(0, 500),
                       reasoning=rng.choice([None, 120]))
        usage = usage + u
        cost = None if price is None else ((u.input or 0) + (u.output or 0)) * price / 1000
        calls.append(ModelCallRecord(
            trial_id=rec.id, seq=seq, wire_api="chat", client_api="responses", model=model,
            upstream_model=model, status_code=200, stream=seq % 2 == 0,
            started_at=(rec.started_at or T0) + timedelta(seconds=seq), latency_s=0.4 + seq,
            ttft_s=0.1, usage=u, cost_usd=cost, bytes_in=2000, bytes_out=800,
            scripted=model.startswith("scripted/")))
    rec.usage = usage
    rec.model_calls = n_calls
    rec.turns = n_calls or None
    rec.cost_usd = (None if price is None or not n_calls
                    else sum(c.cost_usd or 0 for c in calls))
    names = TOOLS.get(agent, [])
    rec.tool_calls = {t: rng.randint(1, 5) for t in names} if n_calls else {}
    store.save_trial(rec)
    if calls:
        store.add_model_calls(rec.run_id, calls, rec.try_number)
    if not artifacts or not rec.status.final:
        return
    ok = rec.status is S.PASSED
    _artifact(store, rec, "verifier.log", "verifier_output",
              f"$ bash /tests/test.sh\n--- exit {0 if ok else 1}\n--- stdout\n"
              f"{'PASS' if ok else 'FAIL: expected 42, got 41'} ({rec.task_id})\n".encode())
    _artifact(store, rec, "fs_diff.json", "fs_diff", json.dumps(
        {"created": ["out.txt"] if ok else [], "modified": ["src/main.py"],
         "deleted": []}).encode())


def populate_grid(store: Store, run_id: str = "grid", seed: int = 3,
                  created: datetime = T0) -> list[ConfigRecord]:
    """8 configurations (2 scripted, 1 unpriced, oracle, nop) × 12 tiered tasks."""
    rng = random.Random(seed)
    store.create_run(RunRecord(id=run_id, created_at=created, status="finished",
                               finished_at=created + timedelta(hours=1)))
    for j, tid in enumerate(TASKS):
        store.upsert_task(TaskRecord(id=tid, digest="d1", tier=TIERS[j],  # type: ignore[arg-type]
                                     category="coding", suite="fixture"), run_id)
    configs = []
    for agent, model, skill, price in GRID:
        cfg = config(agent, model)
        configs.append(cfg)
        store.upsert_config(cfg, run_id)
        for j, tid in enumerate(TASKS):
            difficulty = (1.0, 0.7, 0.45)[j // 4]
            start = created + timedelta(minutes=j)
            base = TrialRecord(id=f"{cfg.id}:{tid}:0", run_id=run_id, config_id=cfg.id,
                               task_id=tid, attempt=0, started_at=start,
                               finished_at=start + timedelta(seconds=20 + 7 * j))
            if agent != "oracle" and rng.random() < 0.12:  # infra failure, then a retry
                bad = base.model_copy(update={"status": S.INFRA_INVALID,
                                              "error": "sandbox: overlay mount failed\n..."})
                _save(store, bad, price, model, rng, agent)
                base = base.model_copy(update={"try_number": 1})
            passed = agent == "oracle" or (agent != "nop" and rng.random() < skill * difficulty)
            status = S.PASSED if passed else rng.choice(FAILS)
            rec = base.model_copy(update={
                "status": status, "passed": passed, "reward": 1.0 if passed else 0.0,
                "error": None if passed or status is S.FAILED else f"{status.value}: agent "
                "stopped\nTraceback (most recent call last): ..."})
            _save(store, rec, price, model, rng, agent)
    # one trial with a big log (truncated when embedded), a screenshot (shown) and a video
    big = store.get_trial(run_id, f"{configs[4].id}:{TASKS[0]}:0")
    assert big is not None
    _artifact(store, big, "agent/codex.log", "agent_log",
              ("".join(f"step {i}: ran tool\n" for i in range(20_000))).encode())
    _artifact(store, big, "screen.png", "screenshot", PNG)
    _artifact(store, big, "session.webm", "video", b"\x1aE\xdf\xa3 (a recording)")
    return configs


def populate_missing(store: Store) -> None:
    """Runs of missing data: no prices, all infra_invalid, a single configuration."""
    rng = random.Random(5)
    # models no price table knows, no stored cost: cost is n/a, never guessed
    unpriced = [("native", "vllm/local-qwen", 0.4, None), ("codex", "vllm/local-llama", 0.5, None)]
    for run_id, grid, kind in (("noprice", unpriced, "noprice"), ("allinfra", GRID[2:5], "infra"),
                               ("single", GRID[5:6], "single")):
        store.create_run(RunRecord(id=run_id, created_at=T0, status="finished"))
        for j, tid in enumerate(TASKS):
            store.upsert_task(TaskRecord(id=tid, digest="d1", tier=TIERS[j]), run_id)  # type: ignore[arg-type]
        for agent, model, skill, price in grid:
            cfg = config(agent, model)
            store.upsert_config(cfg, run_id)
            for tid in TASKS:
                status = (S.INFRA_INVALID if kind == "infra" else
                          S.PASSED if rng.random() < skill else S.FAILED)
                rec = TrialRecord(id=f"{cfg.id}:{tid}:0", run_id=run_id, config_id=cfg.id,
                                  task_id=tid, attempt=0, status=status,
                                  passed=None if kind == "infra" else status is S.PASSED)
                _save(store, rec, None if kind == "noprice" else price, model, rng, agent,
                      artifacts=False)


def test_collect_grid(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        configs = populate_grid(store)
        data = collect(store, ["grid"])
    assert data.card is not None and len(data.card.rows) == len(GRID)
    scripted = {c.id for c in data.configs if c.scripted}
    assert scripted == {configs[2].id, configs[3].id}
    unpriced = data.card.row(configs[7].id)
    assert unpriced.usd is None and unpriced.usd_per_pass is None
    assert {u.agent for u in data.tools} == {"native", "codex", "claude-code"}


def test_report_html_is_self_contained(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        populate_grid(store)
        html = render_report_html(store, ["grid"])
    assert html.startswith("<!doctype html>")
    for external in ("<script src", "<link rel=\"stylesheet\"", "http://", "https://"):
        assert external not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert html.count('data-chart="') == 9
    assert "test double" in html


def test_empty_run_renders_na(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        store.create_run(RunRecord(id="empty", created_at=T0))
        html = render_report_html(store, ["empty"])
    assert "Leaderboard: n/a" in html and "nothing to score" in html
    assert html.count("data-chart-na=") == 9


def test_trial_page_filters_sorts_and_pages_in_sql(tmp_path: Path) -> None:
    from agentmeter.report.html.trials import ROW_COLUMNS, TrialQuery, trial_page

    with Store.open(tmp_path) as store:
        configs = populate_grid(store)
        every = store.trials("grid")
        total, rows = trial_page(store, ["grid"], TrialQuery(), 0, 10)
        assert total == len(every) and len(rows) == 10
        assert all(len(r) == len(ROW_COLUMNS) for r in rows)
        _, rest = trial_page(store, ["grid"], TrialQuery(), 10, 1000)
        assert len(rest) == total - 10
        seen = [(r[1], r[2]) for r in rows + rest]
        assert sorted(seen) == sorted((t.id, t.try_number) for t in every)
        n_infra, infra = trial_page(store, ["grid"], TrialQuery(status="infra_invalid"), 0, 500)
        assert n_infra == sum(t.status is S.INFRA_INVALID for t in every) > 0
        assert {r[6] for r in infra} == {"infra_invalid"}
        cfg = configs[4].id
        n_cfg, by_cost = trial_page(store, ["grid"], TrialQuery(config=cfg, sort="cost",
                                                               desc=True), 0, 500)
        costs = [r[9] for r in by_cost]
        known = [c for c in costs if c is not None]
        assert n_cfg == sum(t.config_id == cfg for t in every)
        assert known == sorted(known, reverse=True) and costs[: len(known)] == known
        n_hit, hits = trial_page(store, ["grid"], TrialQuery(search=TASKS[3]), 0, 500)
        assert n_hit >= len(GRID) and all(TASKS[3] in r[1] for r in hits)


def test_viewer_json_endpoints(tmp_path: Path) -> None:
    import urllib.error
    import urllib.request

    from agentmeter.report.viewer import start_in_thread

    def get(url: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(url) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    with Store.open(tmp_path) as store:
        configs = populate_grid(store)
        viewer = start_in_thread(store)
        try:
            code, body = get(f"{viewer.url}/api/progress?run=grid")
            prog = json.loads(body)
            assert code == 200 and prog["done"] == len(store.trials("grid"))
            assert prog["active"] == 0 and prog["statuses"] == {"grid": "finished"}
            code, body = get(f"{viewer.url}/api/trials?run=grid&limit=7&offset=3")
            page = json.loads(body)
            assert page["total"] == len(store.trials("grid")) and len(page["rows"]) == 7
            trial_id = f"{configs[4].id}:{TASKS[0]}:0"
            code, body = get(f"{viewer.url}/api/trial?run=grid&id={trial_id}")
            detail = json.loads(body)
            assert code == 200 and detail["id"] == trial_id
            assert len(detail["calls"]) == detail["model_calls"]
            shot = next(a for a in detail["artifacts"] if a["name"] == "screen.png")
            code, body = get(viewer.url + shot["href"])
            assert code == 200 and body == PNG
            assert get(f"{viewer.url}/api/trial?run=grid&id=nope")[0] == 404
            assert get(f"{viewer.url}/report?run=nope")[0] == 404
            assert get(f"{viewer.url}/api/trials?run=grid&offset=x")[0] == 400
            escape = shot["href"].replace("screen.png", "..%2F..%2Fagentmeter.db")
            assert get(viewer.url + escape)[0] == 404
            code, body = get(f"{viewer.url}/report?run=grid&fragment=main")
            assert code == 200 and b"<html" not in body and b'id="leaderboard"' in body
            # security review 3: a page whose name was rebound to 127.0.0.1 reads nothing
            port = viewer.url.rsplit(":", 1)[1]
            for host, want in ((f"attacker.example:{port}", 421), (f"localhost:{port}", 200),
                               (f"127.attacker.example:{port}", 421)):  # review 4
                req = urllib.request.Request(f"{viewer.url}/api/trials?run=grid",
                                             headers={"Host": host})
                try:
                    with urllib.request.urlopen(req) as r:
                        assert (r.status, host) == (want, host)
                except urllib.error.HTTPError as e:
                    assert (e.code, host) == (want, host)
        finally:
            viewer.stop()


def test_report_command(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentmeter.cli import app

    with Store.open(tmp_path) as store:
        populate_grid(store)
    runner = CliRunner()
    res = runner.invoke(app, ["report", "grid", "--store", str(tmp_path), "--sort", "usd",
                              "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert len(out["scorecard"]["rows"]) == len(GRID) and len(out["scripted_configs"]) == 2
    res = runner.invoke(app, ["report", "grid", "--store", str(tmp_path), "--sort", "usd"])
    assert res.exit_code == 0 and "scripted test model" in res.output and "Δbest" in res.output
    body = [ln for ln in res.output.splitlines() if ln.startswith("│")]
    usd = [ln.split("│")[8].strip() for ln in body[: len(GRID)]]
    known = [float(u) for u in usd if u != "n/a"]
    assert known == sorted(known) and usd[len(known):] == ["n/a"] * (len(usd) - len(known))
    target = tmp_path / "out" / "report.html"
    res = runner.invoke(app, ["report", "grid", "--store", str(tmp_path), "--html", str(target)])
    assert res.exit_code == 0 and target.is_file() and str(target) in res.output.replace("\n", "")
    # no temp file left; the trials' images and videos beside the report (report_media/)
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.html", "report_media"]
    res = runner.invoke(app, ["report", "nope", "--store", str(tmp_path)])
    assert res.exit_code == 2 and "no run 'nope'" in res.output
    res = runner.invoke(app, ["report", "grid", "--store", str(tmp_path), "--sort", "x"])
    assert res.exit_code == 2


def test_an_artifact_row_naming_a_file_outside_the_run_is_not_embedded(tmp_path: Path) -> None:
    """Security review 3: the report and the viewer read ``run_dir / relpath`` as the store
    says: a copied store or a run directory someone edited (an absolute or ``..`` relpath, a
    link in the run directory) embedded any host file in the report."""
    from agentmeter.report.html.trials import trial_detail
    from agentmeter.report.viewer.app import artifact_link

    secret = tmp_path / "host-secret.log"
    secret.write_text("HOST-SECRET-1234\n")
    with Store.open(tmp_path / "store") as store:
        store.create_run(RunRecord(id="r", created_at=T0, status="finished"))
        store.upsert_task(TaskRecord(id="t1", digest="d1"), "r")
        cfg = config("oracle", NO_MODEL)
        store.upsert_config(cfg, "r")
        rec = TrialRecord(id=f"{cfg.id}:t1:0", run_id="r", config_id=cfg.id, task_id="t1",
                          attempt=0, status=S.PASSED, passed=True, reward=1.0)
        store.save_trial(rec)
        run_dir = store.run_dir("r")
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "linked.log").symlink_to(secret)
        for name, rel in (("abs.log", str(secret)), ("up.log", "../../../host-secret.log"),
                          ("linked.log", "linked.log")):
            store.add_artifact("r", ArtifactRecord(trial_id=rec.id, name=name, kind="agent_log",
                                                   relpath=rel, size=17))
        detail = trial_detail(store, "r", rec.id, None, artifact_link)
    assert detail is not None and len(detail["artifacts"]) == 3
    assert all(a.get("missing") for a in detail["artifacts"])
    assert "HOST-SECRET" not in json.dumps(detail)
