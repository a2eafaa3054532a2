"""A sandbox that fails to stop after its trial is decided (a starved machine, a bridge or
keeper that will not leave) is noted on the try, and never ends the run: the other trials in
flight go on and every try is saved."""

from __future__ import annotations

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
