"""The store on a real PostgreSQL server (started by the test setup): the same records, the
same metrics, reports and trial listings as on SQLite, and a CLI run with resume against it
(``AGENTMETER_DATABASE_URL``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from agency_fixtures import RUN as AGENCY_RUN
from agency_fixtures import agency_store
from pg_fixtures import pg_url_fixture, postgres_url_fixture  # noqa: F401
from taskgen import make_task
from test_report_store import populate_grid
from typer.testing import CliRunner

from agentmeter.metrics import ScoringSpec, load_frame, score
from agentmeter.metrics.frame import ROW_COLUMNS
from agentmeter.metrics.from_store import agency_report
from agentmeter.report.html.collect import collect
from agentmeter.report.html.trials import TrialQuery, trial_page
from agentmeter.store.db import Store
from agentmeter.store.queries import selected_trials


def test_same_metrics_report_and_listing_as_sqlite(pg_url: str, tmp_path: Path) -> None:
    with Store.open(pg_url, runs_dir=tmp_path / "pg") as pg, Store.open(tmp_path / "lite") as lite:
        assert pg.engine.dialect.name == "postgresql"
        for st in (pg, lite):
            populate_grid(st)
        frames = [load_frame(st, ["grid"]) for st in (pg, lite)]
        for name in ROW_COLUMNS:
            np.testing.assert_array_equal(getattr(frames[0], name), getattr(frames[1], name),
                                          err_msg=name)
        spec = ScoringSpec(resamples=50)
        cards = [score(f, spec) for f in frames]
        assert [r.ams for r in cards[0].rows] == [r.ams for r in cards[1].rows]
        assert [r.ci for r in cards[0].rows] == [r.ci for r in cards[1].rows]
        reports = [collect(st, ["grid"]) for st in (pg, lite)]
        assert reports[0].tools == reports[1].tools and reports[0].cells is not None
        for sort in ("tools", "tokens", "cost", "status"):
            pages = [trial_page(st, ["grid"], TrialQuery(sort=sort, desc=True), 0, 25)
                     for st in (pg, lite)]
            assert pages[0] == pages[1], sort
        assert pg.latest_completed_trials("grid") == lite.latest_completed_trials("grid")


def test_cli_run_and_resume_on_postgres(pg_url: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from agentmeter.cli import app

    monkeypatch.setenv("AGENTMETER_DATABASE_URL", pg_url)
    suite = tmp_path / "suite"
    for name in ("a", "b"):
        make_task(suite, name)
    args = ["run", "--suite", str(suite), "-a", "oracle", "-a", "nop", "--run-id", "pg",
            "--store", str(tmp_path / "artifacts")]
    runner = CliRunner()
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, args)
    assert res.exit_code == 0 and "4 trials (4 already complete)" in res.output
    with Store.open(pg_url, runs_dir=tmp_path / "artifacts") as st:
        trials = st.latest_completed_trials("pg")
        assert sorted((t.task_id, t.status.value) for t in trials) == [
            ("a", "failed"), ("a", "passed"), ("b", "failed"), ("b", "passed")]
        logs = [a for t in trials for a in st.artifacts("pg", t.id) if a.name == "verifier.log"]
        assert len(logs) == 4 and all((st.run_dir("pg") / a.relpath).is_file() for a in logs)
    assert not (tmp_path / "artifacts" / "agentmeter.db").exists()  # nothing went to SQLite


def test_agency_scenarios_as_sqlite(pg_url: str, tmp_path: Path) -> None:
    """The scenario figures and the report's AgencyBench section (found by a JSON key query)
    read the same from PostgreSQL."""
    with agency_store(pg_url, runs_dir=tmp_path / "pg") as pg, \
            agency_store(tmp_path / "lite") as lite:
        reports = [agency_report(selected_trials(st, [AGENCY_RUN])) for st in (pg, lite)]
        assert reports[0].model_dump() == reports[1].model_dump()
        assert reports[0].rows[0].summary is not None
        assert reports[0].rows[0].summary.pass_at_scenario == {1: 0.5, 2: 0.5}
        data = collect(pg, [AGENCY_RUN])
        assert data.agency is not None and data.agency.model_dump() == reports[0].model_dump()
