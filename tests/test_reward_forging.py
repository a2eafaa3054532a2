"""No starter task can be passed by a solution that does not solve it.

Every starter task is run with a hostile "solution" (tests/forge_solution.sh) that solves
nothing and tries to forge the reward: module-level ``os._exit(0)`` and reward writes in every
Python file, sitecustomize/usercustomize, the expected binaries, scripts and Makefile replaced by
programs that write 1 to every reward path and kill their parent and everything they can reach,
git configuration and hooks that run code, SQL that creates files, reward files written directly,
and a process left behind that rewrites the reward during verification. Each trial must end
``failed`` with no reward of 1, never ``passed`` and never ``infra_invalid``; the real reference
solutions still pass (test_runner's starter tests). Without the defences (verifier code running
agent code as root, rewards in an agent-writable place) most of these tasks pass.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from docker_fixtures import docker_backend_fixture, docker_daemon_fixture  # noqa: F401

from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.store.db import Store
from agentmeter.tasks.suite import load_suite

FORGE = Path(__file__).parent / "forge_solution.sh"


def forged_starter(tmp_path: Path) -> Path:
    """A copy of the starter suite whose every reference solution is the forging script."""
    suite = tmp_path / "forged-starter"
    shutil.copytree(load_suite("starter").path, suite)
    for solve in suite.glob("*/solution/solve.sh"):
        shutil.copy(FORGE, solve)
    return suite


async def _run_forged(tmp_path: Path, backend: str) -> None:
    store = Store.open(tmp_path / "store")
    req = RunRequest(suites=[str(forged_starter(tmp_path))], agents=["oracle"], concurrency=2,
                     backend=backend)
    rid, _ = await run(store, prepare(req), None)
    trials = store.latest_completed_trials(rid)
    assert len(trials) == 24
    forged = {t.task_id: (t.status.value, t.reward, t.error) for t in trials
              if t.status is not TrialStatus.FAILED or t.reward not in (0.0, None)}
    assert forged == {}, forged


async def test_forging_solutions_score_zero_on_every_starter_task(tmp_path: Path) -> None:
    await _run_forged(tmp_path, "local")


@pytest.mark.slow
async def test_forging_solutions_score_zero_on_docker(tmp_path: Path,
                                                      docker_daemon: object) -> None:
    await _run_forged(tmp_path, "docker")
