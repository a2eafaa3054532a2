"""CLI-Tool-Bench's analyses (metrics/funnel_analyses.py) and the difftest verifier's candidate-side
facts they read: checked against an independent recomputation from the released rows
(tests/fixtures/imports/clitoolbench; run from test_import_clitoolbench's import), and on small
hand-made case records."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentmeter.metrics import funnel_analyses as fa
from agentmeter.verify.difftest import compare
from agentmeter.verify.difftest.config import Case, DifftestConfig, class_keys
from agentmeter.verify.difftest.engine_install import structure
from agentmeter.verify.difftest.verifier import build_cause

FIX = Path(__file__).parent / "fixtures" / "imports" / "clitoolbench"
AGENT = {"OpenHands": "openhands", "Mini-SWE-Agent": "mini-swe-agent"}


def released() -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in json.loads((FIX / "results_metadata_with_sp.json").read_text()):
        groups.setdefault(f"{AGENT[row['framework']]} × {row['model_name']}", []).append(row)
    return groups


def check_released_analyses(report: dict[str, Any], text: str) -> None:
    """The analyses of ``score --metric funnel`` (its JSON ``funnel`` object and its table text)
    on the imported fixture rows, against an independent recomputation from the rows. Called
    by test_import_clitoolbench, which imports and scores the fixture anyway (no second
    import)."""
    ids = {r["label"]: r["config_id"] for r in report["rows"]}
    sms = [r["summary"]["sm"] for r in report["rows"]]
    assert sms == sorted(sms, reverse=True)  # ranked by SM
    for label, rows in released().items():
        cid = ids[label]
        # Table 3: avg / min / max per repository
        cost = report["cost"][cid]
        for ours, field, scale in (("steps", "steps", 1), ("prompt_ktok", "prompt_tokens", 1e3),
                                   ("completion_ktok", "completion_tokens", 1e3),
                                   ("usd", "cost", 1)):
            vals = [r[field] / scale for r in rows]
            assert (cost[ours]["mean"], cost[ours]["min"], cost[ours]["max"]) == pytest.approx(
                (statistics.fmean(vals), min(vals), max(vals))), (label, ours)
        # Fig. 5: the files the agent wrote
        files = [r["files"] for r in rows]
        st = report["structure"][cid]["files"]
        assert (st["median"], st["min"], st["max"]) == (statistics.median(files), min(files),
                                                        max(files))
        # Table 4 over the configuration's own built-and-executed repositories
        ran = [r for r in rows if r["build"] and r["exec"] > 0
               and isinstance(r["time"], float) and isinstance(r["oracle_time"], float)]
        own = report["runtime"]["own"][cid]
        o = statistics.fmean(r["oracle_time"] * 1e3 for r in ran)
        c = statistics.fmean(r["time"] * 1e3 for r in ran)
        assert (own["n"], own["oracle_ms"], own["candidate_ms"], own["ratio"]) == \
            pytest.approx((len(ran), o, c, c / o))
        # RQ2: SM per oracle-LOC bucket (failed builds score 0)
        for tier, lo, hi in (("easy", 0, 1500), ("medium", 1501, 3999), ("hard", 4000, 1e9)):
            g = [r["sm"] if r["build"] else 0.0 for r in rows if lo <= r["oracle_loc"] <= hi]
            b = report["complexity"][cid]["buckets"][tier]
            assert b["n"] == len(g)
            assert b["sm"] == (pytest.approx(statistics.fmean(g)) if g else None)
        x = np.log10([r["oracle_loc"] for r in rows])
        y = [r["sm"] if r["build"] else 0.0 for r in rows]
        assert report["complexity"][cid]["slope_per_decade"] == pytest.approx(
            float(np.polyfit(x, y, 1)[0]))
        # no negative-case data in released rows: robustness is n/a, not 0
        assert report["robustness"][cid]["n"] == 0
        # Table 2: one configuration per model here, so the model average is its own mean
        model = label.split(" × ")[1]
        assert report["models"][model]["sm"] == pytest.approx(
            next(r["summary"]["sm"] for r in report["rows"] if r["label"] == label))
    assert report["structure"]["oracle"]["files"]["n"] == 94
    assert report["complexity"]["all"]["loess"]
    for head in ("RQ2 complexity", "RQ3 cost", "RQ4 structure", "runtime (Table 4)",
                 "Table 2: per model", "funnel by language: SM / FM"):
        assert head in text, head


def test_loess_recovers_a_line_and_stays_within_bounds() -> None:
    x = np.linspace(2, 5, 30)
    assert fa.loess(x, 0.1 * x, [2.5, 4.0]) == pytest.approx([0.25, 0.4])
    repos = [fa.Repo(task=str(i), build=True, exec=1.0, sm=float(i % 2), fm=None,
                     oracle_loc=100 * (i + 1)) for i in range(12)]
    c = fa.complexity(repos)
    assert c.n == 12 and all(0.0 <= v <= 1.0 for _, v in c.loess)
    assert c.buckets["easy"].n == 12 and c.buckets["hard"].sm is None


def test_robustness_scores_failed_builds_zero_and_runtime_uses_the_common_subset() -> None:
    a = [fa.Repo(task="t1", build=True, exec=0.5, sm=0.5, fm=0.5, negative_cases=4,
                 negative_exit_agree=0.75, negative_output_match=0.5, oracle_ms=100,
                 candidate_ms=50),
         fa.Repo(task="t2", build=False, exec=0.0, sm=0.0, fm=0.0)]
    rb = fa.robustness(a)
    assert (rb.n, rb.negative_cases, rb.positive_exec) == (2, 4, 0.25)
    assert (rb.negative_exit_agree, rb.negative_output_match) == (0.375, 0.25)
    unbuilt = [fa.Repo(task="t1", build=False, exec=0.0, sm=0.0, fm=0.0)]
    assert fa.robustness(unbuilt).n == 0  # nothing measured: n/a
    assert fa.robustness(unbuilt, measured=True).negative_exit_agree == 0.0  # others measured
    b = [fa.Repo(task="t1", build=True, exec=1.0, sm=1.0, fm=1.0, oracle_ms=300,
                 candidate_ms=30),
         fa.Repo(task="t2", build=True, exec=1.0, sm=1.0, fm=1.0, oracle_ms=10, candidate_ms=10)]
    rt = fa.runtime({"a": a, "b": b})
    assert rt.common_tasks == ["t1"] and rt.oracle_common_ms == 200
    assert rt.common["b"].ratio == pytest.approx(0.1) and rt.own["b"].n == 2


# --- the verifier's side -----------------------------------------------------------------------

CFG = DifftestConfig(cli_name="greet", language="python")
CASES = [Case(id="p1", cls="greet hi", command="greet hi"),
         Case(id="n1", cls="greet hi", command="greet --bad", expect_error=True),
         Case(id="n2", cls="greet hi", command="greet --worse", expect_error=True)]


def _side(code: int, out: str = "", err: str = "") -> compare.SideResult:
    return compare.SideResult(exit=code, stdout=out, stderr=err, duration_s=0.01)


def _records() -> dict[str, compare.CaseRecord]:
    pairs = {"p1": (_side(0, "hi\n"), _side(0, "hi\n")),
             "n1": (_side(2, err="error: no such option: --bad"),
                    _side(2, err="error: no such option: --bad")),
             "n2": (_side(2, err="error: no such option: --worse"), _side(0, "hi\n"))}
    return {k: compare.CaseRecord.model_validate({"id": k, "class": "greet hi", "status": "ok",
                                                  "oracle": o, "candidate": c})
            for k, (o, c) in pairs.items()}


def test_negative_cases_are_scored_for_the_candidate() -> None:
    out = compare.outcomes(CASES, _records(), CFG, class_keys(CASES))
    named, score = compare.rewards(compare.BuildRecord(build=True), out, judged=False)
    assert score.exec == 1.0 and named["cases_valid"] == 1
    assert named["negative_cases"] == 2.0
    assert named["negative_exit_agree"] == 0.5 and named["negative_output_match"] == 0.5


def test_a_candidate_that_never_built_is_a_candidate_failure_not_a_framework_error() -> None:
    """The engine runs no case when the build fails: records hold neither side."""
    empty = {c.id: compare.CaseRecord.model_validate({"id": c.id, "class": c.cls, "status": "ok"})
             for c in CASES}
    build = compare.BuildRecord(build=False, install_exit=1,
                                log="Processing /difftest/candidate/src\nERROR: No matching "
                                    "distribution found for clack\nnotice: done\n")
    out = compare.outcomes(CASES, empty, CFG, class_keys(CASES), built=build.build)
    named, score = compare.rewards(build, out, judged=False)
    assert {o.status for o in out} == {"not_built"}
    assert named["cases_framework_error"] == 0 and named["cases_not_built"] == 3
    assert named["build"] == 0.0 and score.sm == 0.0
    assert build_cause(build) == ("install exit 1: ERROR: No matching distribution found for "
                                  "clack")
    assert "timed out" in build_cause(compare.BuildRecord(build=False, timed_out=True,
                                                          duration_s=600))
    assert "did not install the command" in build_cause(compare.BuildRecord(
        build=False, install_exit=0, resolved=False, bin_new=["hello"]))


def test_structure_counts_what_the_agent_wrote(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "pkg" / "cli.py").write_text("a\nb\nc")  # no final newline: still 3 lines
    (tmp_path / "pkg" / "sub" / "blob.bin").write_bytes(b"\0\n\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "pkg" / "cli.py")
    assert structure(str(tmp_path)) == {"files": 3, "loc": 5, "directories": 2, "depth": 3}
    assert math.isclose(fa.stat([1, None, 3]).mean or 0, 2.0)


def test_synth_help_shows_its_bracketed_words() -> None:
    from typer.testing import CliRunner

    from agentmeter.cli import app

    r = CliRunner().invoke(app, ["difftest", "synth", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "task.toml with [difftest]" in r.stdout


def test_the_case_se_flag_and_the_class_se_column_are_one_definition() -> None:
    """A case whose candidate failed but left the same files: SE no, in the class rate and in
    the case row alike (the case row once showed the bare file comparison)."""
    from agentmeter.records import CaseOutcome
    from agentmeter.report.html.difftest import Budget, _case

    c = CaseOutcome(id="p1", cls="greet hi", key="c01", command="greet hi", status="valid",
                    oracle_exit=0, candidate_exit=1, side_effects=True)
    named, _ = compare.rewards(compare.BuildRecord(build=True), [c], judged=False)
    assert named["c01.side_effects"] == 0.0
    row = _case(c, "fail", False, Budget(remaining=1000, per_stream=100), 12)
    assert 'title="SE: no"' in row


def test_difftest_new_scaffolds_a_task_that_loads(tmp_path: Path) -> None:
    """`difftest new`: task.toml, the environment (the shared toolchain and wheelhouse, the
    oracle out of every PATH), solve.sh — a task the loader accepts, no file copied by hand."""
    from typer.testing import CliRunner

    from agentmeter.cli import app
    from agentmeter.synth.oracle import load_for_synthesis
    from agentmeter.synth.scaffold import ScaffoldError, scaffold

    proj = tmp_path / "greet"
    proj.mkdir()
    (proj / "pyproject.toml").write_text('[project]\nname = "greet"\nversion = "1"\n'
                                         '[project.scripts]\ngreet = "greet:main"\n')
    (proj / "greet.py").write_text("def main():\n    print('hi')\n")
    r = CliRunner().invoke(app, ["difftest", "new", "greet-task", "--oracle-dir", str(proj),
                                 "--into", str(tmp_path / "suite")])
    assert r.exit_code == 0, r.output
    task = load_for_synthesis(tmp_path / "suite" / "greet-task")  # as `synth` loads it
    assert task.difftest is not None and task.difftest.cli_name == "greet"
    assert not task.allow_internet and not task.network_default  # states its network
    docker = (tmp_path / "suite" / "greet-task" / "environment" / "Dockerfile").read_text()
    assert "PIP_FIND_LINKS=/opt/wheelhouse" in docker and "useradd -u 1001" in docker
    assert "/opt/oracle/bin/greet" in docker and "COPY oracle/" in docker
    assert (tmp_path / "suite" / "greet-task" / "solution" / "greet" / "greet.py").is_file()
    apt = scaffold(tmp_path, "t-apt", "apt", "cowsay", "cowsay")
    assert "install -y --no-install-recommends cowsay" in (apt / "environment" /
                                                            "Dockerfile").read_text()
    pypi = scaffold(tmp_path, "t-pypi", "pypi", "files-to-prompt==0.6")
    pypi_task = load_for_synthesis(pypi).difftest
    assert pypi_task is not None and pypi_task.cli_name == "files-to-prompt"
    for bad in (("t-apt", "apt", "x"), ("t2", "apt", "x; rm -rf /"), ("t3", "dir", str(tmp_path))):
        with pytest.raises(ScaffoldError):
            scaffold(tmp_path, *bad)
    two = CliRunner().invoke(app, ["difftest", "new", "x", "--oracle-apt", "a", "--oracle-pypi",
                                   "b", "--into", str(tmp_path)])
    assert two.exit_code == 2 and "give one of" in two.output
