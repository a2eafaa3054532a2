"""``agentmeter import --format clitoolbench`` on real rows of CLI-Tool-Bench's released
``results_metadata_with_sp.json`` (tests/fixtures/imports/clitoolbench: rows 1–94 of the file,
the whole gpt-5.4 × OpenHands block; rows 95–110, the first 16 of claude-sonnet-4-6 ×
OpenHands; the file's last 20 rows, kimi-k2.5 × Mini-SWE-Agent; and the released
category.json), scored with ``agentmeter score --metric funnel`` and checked against the
publisher's leaderboard rule (generate_artifact_docs.py: plain mean per (model, framework), SD
of sm with n − 1, CI = 1.645·SD/√n) recomputed here by hand, and for the complete block
against the published docs/LEADERBOARD.md row."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import pytest
from test_funnel_analyses import check_released_analyses
from typer.testing import CliRunner

from agentmeter.cli import app
from agentmeter.importers import ImportFormatError, detect_format, load_import
from agentmeter.importers.clitoolbench import tier_of
from agentmeter.store.db import Store

FIX = Path(__file__).parent / "fixtures" / "imports" / "clitoolbench"
RESULTS = FIX / "results_metadata_with_sp.json"
CATEGORIES = FIX / "category.json"
RUN = "clitoolbench-results_metadata_with_sp"
runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def rows() -> list[dict[str, Any]]:
    data = json.loads(RESULTS.read_text())
    assert isinstance(data, list)
    return data


def publisher(group: list[dict[str, Any]]) -> dict[str, float]:
    """generate_artifact_docs.py's compute_leaderboard, written out."""
    n = len(group)
    total = {f: 0.0 for f in ("build", "exec", "sm", "prompt_tokens", "completion_tokens")}
    for r in group:
        for f in total:
            total[f] += float(r.get(f, 0) or 0)
    sm_mean = total["sm"] / n
    squares = 0.0
    for r in group:
        squares += (float(r["sm"]) - sm_mean) ** 2
    sd = math.sqrt(squares / (n - 1))
    return {"n": n, "build": total["build"] / n, "exec": total["exec"] / n, "sm": sm_mean,
            "sd": sd, "ci": 1.645 * sd / math.sqrt(n),
            "tokens": total["prompt_tokens"] / n + total["completion_tokens"] / n}


def test_released_rows_reproduce_the_publishers_leaderboard(tmp_path: Path) -> None:
    assert detect_format(RESULTS) == "clitoolbench"
    code, out, err = cli("import", str(RESULTS), "--categories", str(CATEGORIES), "--store",
                         str(tmp_path), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["trials"] == 130 and summary["tasks"] == 94
    assert sorted(summary["configs"]) == ["mini-swe-agent × kimi-k2.5",
                                          "openhands × claude-sonnet-4-6",
                                          "openhands × gpt-5.4"]
    code, out, err = cli("score", RUN, "--store", str(tmp_path), "--metric", "funnel", "--json")
    assert code == 0, err
    funnel_json = json.loads(out)["funnel"]
    report = {r["label"]: r for r in funnel_json["rows"]}
    groups: dict[str, list[dict[str, Any]]] = {}
    agent = {"OpenHands": "openhands", "Mini-SWE-Agent": "mini-swe-agent"}
    for r in rows():
        groups.setdefault(f"{agent[r['framework']]} × {r['model_name']}", []).append(r)
    assert set(groups) == set(report)
    for label, group in groups.items():
        want, got = publisher(group), report[label]["summary"]
        assert got["n"] == want["n"], label
        for ours, theirs in (("build", "build"), ("exec", "exec"), ("sm", "sm"),
                             ("sm_sd", "sd"), ("sm_ci90", "ci")):
            assert got[ours] == pytest.approx(want[theirs], abs=1e-12), (label, ours)
        tokens = (report[label]["prompt_ktok_per_repo"]
                  + report[label]["completion_ktok_per_repo"]) * 1e3
        assert tokens == pytest.approx(want["tokens"]), label
    # the complete block against docs/LEADERBOARD.md: rank 8, gpt-5.4 / OpenHands
    g = report["openhands × gpt-5.4"]["summary"]
    assert (f"{g['build']:.1%}", f"{g['exec']:.1%}", f"{g['sm']:.1%}") == \
        ("79.8%", "59.7%", "28.9%")
    assert (f"{g['sm_sd']:.3f}", f"±{g['sm_ci90']:.1%}") == ("0.322", "±5.5%")
    assert int(publisher(groups["openhands × gpt-5.4"])["tokens"]) == 168_498
    # sp was not computed for most JavaScript rows of this block: side effects are n/a there
    assert g["side_effects"] is None
    assert report["mini-swe-agent × kimi-k2.5"]["summary"]["side_effects"] is not None
    r = runner.invoke(app, ["score", RUN, "--store", str(tmp_path), "--metric", "funnel"],
                      env={"COLUMNS": "250"})
    code, out, err = r.exit_code, r.stdout, r.stderr
    assert code == 0, err
    assert "SM SD" in out and "0.322" in out and "±5.5%" in out and "79.8%" in out
    check_released_analyses(funnel_json, out)  # RQ2–4, §5.1, Table 2 (test_funnel_analyses)
    # the HTML report draws them (inline SVG, no script)
    from agentmeter.report.html import render_report_html

    with Store.open(tmp_path) as st:
        page = render_report_html(st, [RUN])
    funnel = page.split('<section id="funnel">', 1)[1].split("</section>", 1)[0]
    assert '<a href="#funnel">CLI generation</a>' in page
    for chart in ("funnel", "complexity", "complexity-trend", "funnel-cost", "funnel-structure",
                  "funnel-runtime"):
        assert f'<svg class="chart" data-chart="{chart}"' in funnel, chart
    # the released rows carry no negative cases: robustness is n/a, with the reason
    assert 'data-chart-na="funnel-robustness"' in funnel and "no negative case" in funnel
    assert "<script" not in funnel
    first = funnel_json["rows"][0]["label"]  # ranked by SM: the first bar group is the best
    assert funnel.index(html.escape(first)) < funnel.index(html.escape(funnel_json["rows"][1]["label"]))


def test_row_fields_become_trial_and_task_records(tmp_path: Path) -> None:
    imported = load_import(RESULTS, "clitoolbench", categories=CATEGORIES)
    tasks = {t.id: t for t in imported.tasks}
    assert tasks["consi/ymldiff"].tier == "medium" and tasks["consi/ymldiff"].category == "Testing"
    assert tasks["consi/ymldiff"].tags == ["language:go"]
    assert tasks["cyberxuan-XBX/gscc"].tier == "easy"  # oracle_loc 533
    assert tasks["ako/backing-tracks"].tier == "hard"  # oracle_loc 14672
    labels = {c.id: c.label for c in imported.configs}
    by = {(labels[t.config_id], t.task_id): t for t in imported.trials}
    t = by[("openhands × gpt-5.4", "consi/ymldiff")]
    assert t.attempt == 0 and t.reward == 0.4925 and t.status.value == "failed"
    assert t.rewards == {"build": 1.0, "all.exec": 0.5, "all.em": 0.4925, "all.fm": 0.495,
                         "all.sm": 0.4925, "all.side_effects": 0.5}
    assert (t.usage.input, t.usage.output, t.cost_usd, t.turns) == (360226, 17879,
                                                                     1.1687500000000002, 19)
    assert t.extra["time"] == 0.051653000000000004 and t.extra["oracle_loc"] == 1669
    assert t.extra["reward_metric"] == "sm" and t.extra["framework"] == "OpenHands"
    # "Time N/A" is n/a; sp == exec_check == 0 with exec > 0: sp never computed, no key
    js = by[("openhands × gpt-5.4", "webpro-nl/remove-unused-vars")]
    assert "all.side_effects" not in js.rewards and js.extra["sp_computed"] is False
    assert by[("openhands × gpt-5.4", "jrswab/lsq")].extra["time"] is None
    # sp 0 with exec_check 1: computed, kept as 0
    assert by[("openhands × gpt-5.4", "AlekSi/hardcache")].rewards["all.side_effects"] == 0.0
    assert by[("mini-swe-agent × kimi-k2.5", "uladkaminski/pyparseit")].status.value == "passed"
    assert (tier_of(1500), tier_of(1501), tier_of(3999), tier_of(4000)) == \
        ("easy", "medium", "medium", "hard")


def _write(tmp_path: Path, data: object) -> Path:
    p = tmp_path / "results_metadata_with_sp.json"
    p.write_text(json.dumps(data))
    return p


def test_excluded_repositories_are_left_out_unless_asked(tmp_path: Path) -> None:
    real = rows()[:2]
    # the released file has no rows of the excluded repositories; one is made from a real row
    extra = dict(real[0], instance_id="Matricess/depcycle")
    src = _write(tmp_path, [*real, extra])
    code, out, err = cli("import", str(src), "--store", str(tmp_path / "s1"), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["trials"] == 2 and "excluded" in data["notes"][0]
    code, out, err = cli("import", str(src), "--include-excluded", "--store",
                         str(tmp_path / "s2"), "--json")
    assert code == 0, err
    assert json.loads(out)["trials"] == 3


@pytest.mark.parametrize(("change", "message"), [
    ({"sm": 1.2}, "row 2 (ako/backing-tracks), field sm: expected a number in [0, 1], got 1.2"),
    ({"build": 2}, "row 2 (ako/backing-tracks), field build: expected 0 or 1"),
    ({"exec": None}, "row 2 (ako/backing-tracks), field exec: expected a number in [0, 1]"),
    ({"prompt_tokens": -5}, "field prompt_tokens: expected a whole number >= 0, got -5"),
    ({"time": "soon"}, "field time: expected a number >= 0, got 'soon'"),
    ({"model_name": ""}, "row 2 (ako/backing-tracks), field model_name: expected a non-empty"),
    ({"instance_id": 7}, "row 2, field instance_id: expected a non-empty string, got 7"),
])
def test_bad_rows_name_row_and_field_and_write_nothing(tmp_path: Path, change: dict[str, Any],
                                                       message: str) -> None:
    real = rows()[:3]
    src = _write(tmp_path, [real[0], {**real[1], **change}, real[2]])
    code, out, err = cli("import", str(src), "--store", str(tmp_path / "store"))
    assert code != 0 and message in " ".join(err.split())
    with Store.open(tmp_path / "store") as store:
        assert store.get_run(RUN) is None


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ImportFormatError, match="expected a JSON array"):
        load_import(_write(tmp_path, {"rows": []}), "clitoolbench")
    with pytest.raises(ImportFormatError, match="row 2: expected an object"):
        load_import(_write(tmp_path, [rows()[0], [1]]), "clitoolbench")
    dup = _write(tmp_path, [rows()[0], rows()[0]])
    with pytest.raises(ImportFormatError, match="row 2 .*a second trial"):
        load_import(dup, "clitoolbench")
    cats = tmp_path / "category.json"
    cats.write_text(json.dumps({"A": ["x/y"], "B": ["x/y"]}))
    with pytest.raises(ImportFormatError, match="x/y is in both 'A' and 'B'"):
        load_import(RESULTS, "clitoolbench", categories=cats)
    with pytest.raises(ImportFormatError, match="are for --format clitoolbench"):
        load_import(RESULTS, "table", categories=CATEGORIES)


# --- the table importer carries the funnel columns -------------------------------------------

def _funnel(store: Path, run: str) -> dict[str, dict[str, Any]]:
    code, out, err = cli("score", run, "--store", str(store), "--metric", "funnel", "--json")
    assert code == 0, err
    return {r["label"]: r["summary"] for r in json.loads(out)["funnel"]["rows"]}


def test_table_funnel_columns_are_scored(tmp_path: Path) -> None:
    """A CSV of the released rows (sp left empty where it was not computed) imports through a
    mapping into the same funnel as the clitoolbench importer; an export round-trips it."""
    lines = ["instance_id,model_name,framework,build,exec,em,fm,sm,sp"]
    for r in rows():
        computed = not (r["sp"] == 0 and r["exec_check"] == 0 and r["exec"] > 0)
        lines.append(",".join(str(r[k]) for k in ("instance_id", "model_name", "framework",
                                                   "build", "exec", "em", "fm", "sm"))
                     + "," + (str(r["sp"]) if computed else ""))
    (tmp_path / "released.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "map.toml").write_text(
        '[columns]\ntask = "instance_id"\nmodel = "model_name"\nagent = "framework"\n')
    store = tmp_path / "store"
    code, out, err = cli("import", str(tmp_path / "released.csv"), "--mapping",
                         str(tmp_path / "map.toml"), "--run-id", "tbl", "--store", str(store))
    assert code == 0, err
    code, out, err = cli("import", str(RESULTS), "--store", str(store))
    assert code == 0, err
    table, native = _funnel(store, "tbl"), _funnel(store, RUN)
    agent = {"OpenHands": "openhands", "Mini-SWE-Agent": "mini-swe-agent"}
    for label, summary in table.items():
        framework, model = label.split(" × ")
        twin = native[f"{agent[framework]} × {model}"]
        for level in ("n", "build", "exec", "side_effects", "em", "fm", "sm", "sm_sd"):
            assert summary[level] == pytest.approx(twin[level], abs=1e-12), (label, level)
    with Store.open(store) as st:  # reward defaults to the row's SM
        gpt = next(c.id for c in st.run_configs("tbl") if c.model.name == "gpt-5.4")
        t = next(t for t in st.trials("tbl")
                 if t.task_id == "consi/ymldiff" and t.config_id == gpt)
        assert t.reward == 0.4925 and t.rewards["all.fm"] == 0.495
    # export -> import keeps the repository scores
    code, out, err = cli("export", RUN, "--format", "csv", "--store", str(store))
    assert code == 0, err
    (tmp_path / "again.csv").write_text(out)
    code, out, err = cli("import", str(tmp_path / "again.csv"), "--run-id", "again",
                         "--store", str(store))
    assert code == 0, err
    again = _funnel(store, "again")
    for label, summary in native.items():
        for level in ("n", "build", "exec", "side_effects", "em", "fm", "sm", "sm_sd"):
            assert again[label][level] == pytest.approx(summary[level], abs=1e-12)


@pytest.mark.parametrize(("cells", "message"), [
    ("1,1.5", "row 1, column 'sm': sm must be in [0, 1], got '1.5'"),
    ("0.5,0.2", "row 1, column 'build': build must be 0 or 1, got '0.5'"),
])
def test_table_bad_funnel_values(tmp_path: Path, cells: str, message: str) -> None:
    src = tmp_path / "t.csv"
    src.write_text(f"task,model,agent,build,sm\nx/y,m,a,{cells}\n")
    code, _, err = cli("import", str(src), "--store", str(tmp_path / "store"))
    assert code != 0 and message in " ".join(err.split())
