"""The analysis commands end to end on real SQLite stores written through the Store API:
score (JSON shape, hand values), compare (hand-made ranks), reprice (Eq. 2 exactly), export
round trips, subsets and core-subset saved to a real suite."""

from __future__ import annotations

import json
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from taskgen import make_task
from test_metrics_store import populate
from typer.testing import CliRunner

from agentmeter.cli import app
from agentmeter.records import (
    AgentSpec,
    ConfigRecord,
    ModelCallRecord,
    ModelSpec,
    RunRecord,
    TaskRecord,
    TokenUsage,
    TrialRecord,
    TrialStatus,
)
from agentmeter.store.db import Store

S = TrialStatus
T0 = datetime(2026, 6, 4, tzinfo=UTC)
runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def _config(store: Store, run: str, cid: str, agent: str, model: str = "M",
            price_key: str | None = "scripted/solver") -> None:
    store.upsert_config(ConfigRecord(id=cid, label=f"{agent} × {model}",
                                     model=ModelSpec(name=model, price_key=price_key),
                                     agent=AgentSpec(name=agent)), run)


def test_score_json_shape_and_values(tmp_path: Path) -> None:
    populate(tmp_path).close()
    code, out, _ = cli("score", "r1", "--store", str(tmp_path), "--tiers", "stored",
                       "--budgets", "table1", "--metric", "all", "--resamples", "50", "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"runs", "subset", "scorecard", "pass_k", "allocation"}
    card = data["scorecard"]
    rows = {r["config_id"]: r for r in card["rows"]}
    # the paper's reading by default: A's infra_invalid h1 contributes zero (hard .38, not .76)
    assert rows["A"]["ams"] == pytest.approx((0.21 + 0.345 + 0.38) / 3)
    assert card["infra_policy"] == "zero"
    assert rows["A"]["usd"] == pytest.approx(7.07) and rows["A"]["passes"] == 3
    assert rows["A"]["repeated_reads"]["not_recorded"] == 6  # the summary is in the JSON
    assert "pass_rate" in rows["A"]["ci"]  # AMS CI is n/a when a resample has no hard task
    assert card["winners"]["ams"] == ["A"] and card["bootstrap"]["resamples"] == 50
    assert {t["tier"] for t in card["tiers"]} == {"easy", "medium", "hard"}
    assert [p["k"] for p in data["pass_k"]] == [1, 1]
    assert data["allocation"]["overall"]["passed"]["n"] == 4  # A 3, B 1


def test_score_table_and_errors(tmp_path: Path) -> None:
    populate(tmp_path).close()
    code, out, _ = cli("score", "r1", "--store", str(tmp_path), "--resamples", "20")
    assert code == 0
    assert "AgentMeter leaderboard" in out and "Δbest" in out and "winners" in out
    code, _, err = cli("score", "nope", "--store", str(tmp_path))
    assert code == 2 and "no run 'nope'" in err
    bad = tmp_path / "budgets.toml"
    bad.write_text("[tiers.easy]\nbudgets = [-1]\n")
    code, _, err = cli("score", "r1", "--store", str(tmp_path), "--budgets", str(bad))
    assert code == 2 and "budgets.toml" in err and "tiers.easy.budgets" in err
    tiers = tmp_path / "tiers.toml"
    tiers.write_text('easy = ["e1", "e2"]\nmedium = ["m1", "m2"]\nh1 = "hard"\nh2 = "hard"\n')
    code, out, _ = cli("score", "r1", "--store", str(tmp_path), "--tiers", str(tiers),
                       "--budgets", "table1", "--infra-invalid", "exclude", "--json")
    assert code == 0
    a = next(r for r in json.loads(out)["scorecard"]["rows"] if r["config_id"] == "A")
    assert a["ams"] == pytest.approx((0.21 + 0.345 + 0.76) / 3)
    # unknown option values name the allowed ones, on every command computing the AMS
    for cmd in (["score", "r1"], ["compare", "r1", "r1"], ["core-subset", "r1", "--per-tier",
                                                            "1"], ["report", "r1"]):
        code, _, err = cli(*cmd, "--store", str(tmp_path), "--infra-invalid", "drop")
        assert code == 2 and "--infra-invalid 'drop': use zero or exclude" in err, (cmd, err)
        code, _, err = cli(*cmd, "--store", str(tmp_path), "--duplicate-budgets", "x")
        assert code == 2 and "--duplicate-budgets 'x': use keep or merge" in err, (cmd, err)
    code, out, _ = cli("report", "r1", "--store", str(tmp_path), "--tiers", "stored",
                       "--resamples", "0", "--infra-invalid", "exclude", "--json")
    assert code == 0 and json.loads(out)["scorecard"]["infra_policy"] == "exclude"
    code, out, _ = cli("score", "r1", "--store", str(tmp_path))
    assert code == 0 and "repeated file reads" in out and "infra_invalid: zero" in out


def _reward_run(store: Store, run: str, day: int, rewards: dict[str, float]) -> None:
    """Every config gets the same reward on one task per tier at zero cost: AMS = reward."""
    store.create_run(RunRecord(id=run, created_at=T0 + timedelta(days=day), status="finished"))
    for cid in rewards:
        _config(store, run, cid, cid)
    for tid, tier in (("e", "easy"), ("m", "medium"), ("h", "hard")):
        store.upsert_task(TaskRecord(id=tid, digest="d", tier=tier), run)  # type: ignore[arg-type]
        for cid, r in rewards.items():
            store.save_trial(TrialRecord(id=f"{cid}:{tid}:0", run_id=run, config_id=cid,
                                         task_id=tid, attempt=0, status=S.FAILED, reward=r,
                                         passed=False, usage=TokenUsage(input=10, output=1),
                                         cost_usd=0.0))


def test_a_registered_metric_is_scored_and_shown(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A new metric is one function plus one registry line: ``score`` computes it by name,
    puts it in the JSON under its key, shows it in the terminal and includes it in ``all``."""
    from pydantic import BaseModel

    from agentmeter.metrics import registry

    class Counts(BaseModel):
        trials: int
        passed: int

    def counts(m: registry.MetricInputs) -> Counts:
        data = m.trials()
        return Counts(trials=len(data.selected),
                      passed=sum(t.status is S.PASSED for t in data.selected))

    monkeypatch.setitem(registry.METRICS, "counts", registry.Metric("trial_counts", counts))
    populate(tmp_path).close()
    code, out, err = cli("score", "r1", "--store", str(tmp_path), "--metric", "counts", "--json")
    assert code == 0, err
    data = json.loads(out)["trial_counts"]
    assert data["trials"] > 0 and 0 < data["passed"] <= data["trials"]
    code, out, _ = cli("score", "r1", "--store", str(tmp_path), "--metric", "counts")
    assert code == 0 and "counts: r1" in out and '"passed"' in out
    code, out, _ = cli("score", "r1", "--store", str(tmp_path), "--tiers", "stored",
                       "--budgets", "table1", "--metric", "all", "--json")
    assert code == 0 and {"scorecard", "pass_k", "trial_counts"} <= set(json.loads(out))


def test_compare_hand_made(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        _reward_run(store, "ra", 0, {"c1": 0.9, "c2": 0.6, "c3": 0.3, "c4": 0.0})
        _reward_run(store, "rb", 1, {"c1": 0.6, "c2": 0.9, "c3": 0.3, "c4": 0.0})
    code, out, _ = cli("compare", "ra", "rb", "--store", str(tmp_path), "--tiers", "stored",
                       "--budgets", "table1", "--json")
    assert code == 0
    d = json.loads(out)
    # ranks (4,3,2,1) vs (3,4,2,1): rho = 1 - 6*2/(4*15); one discordant pair of six
    assert d["spearman"] == pytest.approx(0.8)
    assert d["kendall"] == pytest.approx(4 / 6)
    assert d["mae"] == pytest.approx(0.15)
    assert d["top1_kept"] is False and d["topk_kept"] is True and d["n"] == 4
    assert d["ams"]["c1"] == [pytest.approx(0.9), pytest.approx(0.6)]
    # a scorecard file works as either side
    code, out, _ = cli("score", "rb", "--store", str(tmp_path), "--tiers", "stored",
                       "--budgets", "table1", "--json")
    (tmp_path / "rb.json").write_text(out)
    code, out, _ = cli("compare", "ra", str(tmp_path / "rb.json"), "--store", str(tmp_path),
                       "--tiers", "stored", "--budgets", "table1", "--json")
    assert code == 0 and json.loads(out)["spearman"] == pytest.approx(0.8)
    code, out, _ = cli("compare", "ra", "rb", "--store", str(tmp_path), "--tiers", "stored",
                       "--budgets", "table1")
    assert code == 0 and "Spearman" in out and "Top-3 kept" in out


def test_subset_compare_and_core_subset_saved(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    tiers = {"e1": "easy", "e2": "easy", "m1": "medium", "m2": "medium", "h1": "hard",
             "h2": "hard"}
    for tid, tier in tiers.items():
        make_task(suite, tid, tier=tier)
    (suite / "suite.toml").write_text('name = "mini"\n\n[subsets]\nfirst = ["e1", "m1", "h2"]\n')
    populate(tmp_path / "st").close()
    st = str(tmp_path / "st")
    code, out, err = cli("compare", "r1", "--subset", "first", "--suite", str(suite),
                         "--store", st, "--tiers", "stored", "--budgets", "table1", "--json")
    assert code == 0, err
    assert json.loads(out)["other"] == "r1@first" and json.loads(out)["n"] == 2
    code, out, _ = cli("score", "r1", "--subset", "first", "--suite", str(suite), "--store", st,
                       "--tiers", "stored", "--budgets", "table1", "--json")
    assert code == 0 and json.loads(out)["scorecard"]["n_tasks"] == 3
    code, out, err = cli("core-subset", "r1", "--per-tier", "1", "--save", "core",
                         "--suite", str(suite), "--store", st, "--tiers", "stored",
                         "--budgets", "table1", "--json")
    assert code == 0, err
    core = json.loads(out)
    saved = tomllib.loads((suite / "suite.toml").read_text())
    assert saved["name"] == "mini" and saved["subsets"]["first"] == ["e1", "m1", "h2"]
    assert saved["subsets"]["core"] == [t for g in ("easy", "medium", "hard")
                                        for t in core["tasks"][g]]
    assert len(saved["subsets"]["core"]) == 3
    code, _, err = cli("core-subset", "r1", "--per-tier", "1", "--save", "core",
                       "--suite", str(suite), "--store", st)
    assert code == 2 and "exists already" in err


SNAPSHOT = """date = "2026-01-15"
currency = "CNY"
usd_per_unit = 0.14
label = "acme list prices"

[models."acme/coder"]
input = 2.0
output = 8.0
cache_write = 2.5
cache_read = 0.2
"""


def _call(trial: str, seq: int, usage: TokenUsage, cost: float) -> ModelCallRecord:
    return ModelCallRecord(trial_id=trial, seq=seq, wire_api="chat", client_api="chat",
                           model="acme/coder", upstream_model="acme/coder", status_code=200,
                           stream=False, started_at=T0, latency_s=0.5, usage=usage,
                           cost_usd=cost)


def test_reprice_follows_eq2(tmp_path: Path) -> None:
    snap = tmp_path / "acme.toml"
    snap.write_text(SNAPSHOT)
    u1 = TokenUsage(input=1000, output=200, cache_creation=100, cache_read=600)
    u2 = TokenUsage(input=500, output=50)
    u3 = TokenUsage(input=3000, output=10, cache_read=2500)
    with Store.open(tmp_path) as store:
        store.create_run(RunRecord(id="r", created_at=T0, status="finished"))
        _config(store, "r", "K", "codex", "acme/coder", "acme/coder")
        _config(store, "r", "O", "oracle", "none", None)
        store.upsert_task(TaskRecord(id="t", digest="d", tier="easy"), "r")
        store.save_trial(TrialRecord(id="K:t:0", run_id="r", config_id="K", task_id="t",
                                     attempt=0, status=S.PASSED, passed=True, usage=u1 + u2,
                                     cost_usd=9.0, model_calls=2))
        store.add_model_calls("r", [_call("K:t:0", 0, u1, 4.0), _call("K:t:0", 1, u2, 5.0)])
        store.save_trial(TrialRecord(id="K:t:1", run_id="r", config_id="K", task_id="t",
                                     attempt=1, status=S.FAILED, passed=False, usage=u3,
                                     cost_usd=1.0))  # imported-style: no calls stored
        store.save_trial(TrialRecord(id="O:t:0", run_id="r", config_id="O", task_id="t",
                                     attempt=0, status=S.PASSED, passed=True))
    code, out, err = cli("reprice", "r", "--prices", str(snap), "--store", str(tmp_path),
                         "--json")
    assert code == 0, err

    def eq2(x: int, y: int, a: int, h: int) -> float:
        return (2.0 * (x - a - h) + 8.0 * y + 2.5 * a + 0.2 * h) / 1e6 * 0.14

    c1, c2 = eq2(1000, 200, 100, 600), eq2(500, 50, 0, 0)
    with Store.open(tmp_path) as store:
        calls = store.model_calls("r")
        assert [c.cost_usd for c in calls] == [pytest.approx(c1), pytest.approx(c2)]
        assert store.get_trial("r", "K:t:0").cost_usd == pytest.approx(c1 + c2)  # type: ignore[union-attr]
        assert store.get_trial("r", "K:t:1").cost_usd == pytest.approx(  # type: ignore[union-attr]
            eq2(3000, 10, 0, 2500))
        assert store.get_trial("r", "O:t:0").cost_usd is None  # type: ignore[union-attr]
        run = store.get_run("r")
        assert run is not None and run.pricing_snapshot == "acme list prices"
        assert run.settings["repricing"][0]["dates"] == ["2026-01-15"]
    d = json.loads(out)
    assert d["trials"] == 2 and d["model_calls"] == 2 and d["unpriced"] == []
    # a snapshot that does not price the model changes nothing
    other = tmp_path / "other.toml"
    other.write_text('date = "2026-02-01"\n[models."zzz/*"]\ninput = 1.0\noutput = 1.0\n')
    code, _, err = cli("reprice", "r", "--prices", str(other), "--store", str(tmp_path))
    assert code == 2 and "no price for codex × acme/coder" in err and "nothing was changed" in err
    with Store.open(tmp_path) as store:
        assert store.get_trial("r", "K:t:1").cost_usd == pytest.approx(  # type: ignore[union-attr]
            eq2(3000, 10, 0, 2500))


def test_export_round_trips(tmp_path: Path) -> None:
    populate(tmp_path).close()
    st = str(tmp_path)
    with Store.open(tmp_path) as store:
        tries = len(store.trials("r1"))
    code, out, _ = cli("export", "r1", "--format", "csv", "--store", st)
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == tries + 1 and lines[0].startswith("run_id,trial_id,config_id")
    code, _, _ = cli("export", "r1", "--format", "jsonl", "-o", str(tmp_path / "r1.jsonl"),
                     "--store", st)
    rows = [json.loads(x) for x in (tmp_path / "r1.jsonl").read_text().splitlines()]
    assert code == 0 and len(rows) == tries
    assert sum(r["selected"] for r in rows) == 11  # 12 completed tries, one retried
    assert {r["status"] for r in rows} >= {"passed", "failed", "infra_invalid", "running"}
    (tmp_path / "r1.csv").write_text(out)
    code, out, err = cli("import", str(tmp_path / "r1.csv"), "--run-id", "r1-copy",
                         "--store", st, "--json")
    assert code == 0, err and json.loads(out)["trials"] == tries
    with Store.open(tmp_path) as store:
        assert len(store.trials("r1-copy")) == tries
        assert {c.id for c in store.run_configs("r1-copy")} == {"A", "B"}
    a, b = (json.loads(cli("score", r, "--store", st, "--tiers", "stored", "--budgets",
                           "table1", "--json")[1])["scorecard"]["rows"] for r in ("r1", "r1-copy"))
    assert [(r["config_id"], r["ams"], r["usd"]) for r in a] == \
        [(r["config_id"], pytest.approx(r["ams"]), pytest.approx(r["usd"])) for r in b]


def test_export_parquet(tmp_path: Path) -> None:
    populate(tmp_path).close()
    out = tmp_path / "r1.parquet"
    code, _, err = cli("export", "r1", "--format", "parquet", "-o", str(out), "--store",
                       str(tmp_path))
    try:
        import pyarrow.parquet as pq
    except ImportError:
        assert code == 2 and "pip install pyarrow" in err and not out.exists()
        pytest.skip("pyarrow is not installed: Parquet is optional (the clear error is tested)")
    assert code == 0 and pq.read_table(out).num_rows == 13
    code, res, err = cli("import", str(out), "--run-id", "back", "--store", str(tmp_path),
                         "--json")
    assert code == 0, err
    assert json.loads(res)["trials"] == 13
