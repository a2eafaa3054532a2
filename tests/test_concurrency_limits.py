"""Many concurrent trials on one machine (benchmarks/concurrency.py): a sandbox that fails to
stop after its trial is decided (a starved machine, a bridge or keeper that will not leave) is
noted on the try and never ends the run, and a run lifts its open-files limit."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
from taskgen import make_task

from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.sandbox.local import LocalSandbox
from agentmeter.store.db import Store


async def test_a_sandbox_stop_error_is_noted_not_fatal(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    suite = tmp_path / "suite"
    for i in range(2):
        make_task(suite, f"t{i}", solve="echo done > /app/done")
    original = LocalSandbox.stop

    async def stop_then_fail(self: LocalSandbox, **kw: object) -> None:
        await original(self, **kw)  # type: ignore[arg-type]
        raise ProcessLookupError

    monkeypatch.setattr(LocalSandbox, "stop", stop_then_fail)
    store = Store.open(tmp_path / "runs")
    rid, progress = await run(store, prepare(RunRequest(suites=[str(suite)], agents=["oracle"],
                                                        concurrency=2, max_infra_retries=0)))
    trials = store.trials(rid)
    assert progress.done == 2 and len(trials) == 2
    assert {t.status for t in trials} == {TrialStatus.PASSED}
    assert all("ProcessLookupError" in str(t.extra.get("sandbox_stop_error")) for t in trials)


async def test_a_run_raises_its_open_files_limit(tmp_path: Path) -> None:
    """Each concurrent trial holds ≈ 9-10 of the harness's descriptors: a run lifts the soft
    limit (often 1,024) to the hard one, so ≈ 100+ concurrent trials do not end in EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        make_task(tmp_path / "suite", "t0", solve="echo done > /app/done")
        store = Store.open(tmp_path / "runs")
        await run(store, prepare(RunRequest(suites=[str(tmp_path / "suite")], agents=["oracle"])))
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 256
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
