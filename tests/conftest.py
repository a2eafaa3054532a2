"""Shared fixtures. Tests use real components: real bubblewrap sandboxes, real SQLite, real
dockerd (started by the session when none runs). The only test double is the scripted model."""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# session fixtures ``docker_daemon`` and ``docker_backend`` (dockerd started when none runs)
from docker_fixtures import (  # noqa: F401
    RUN_DIR_ENV,
    docker_backend_fixture,
    docker_daemon_fixture,
    stop_shared_dockerd,
)

from agentmeter.sandbox.local import LocalBackend

try:
    from xdist.scheduler import LoadFileScheduling
except ImportError:  # pytest-xdist not installed: one process, nothing to schedule
    LoadFileScheduling = None

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
SRC = Path(__file__).resolve().parent.parent / "src"

# subprocesses (``python -m agentmeter.cli …``) import the source tree, as pytest itself does
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])


#: set on the controller when it made the shared directory
_OWN_RUN_DIR = pytest.StashKey[bool]()


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """The controller of an xdist run makes the directory its workers share (inherited through
    the environment): the one Docker daemon of the run is recorded there."""
    if _is_controller(config) and RUN_DIR_ENV not in os.environ:
        os.environ[RUN_DIR_ENV] = tempfile.mkdtemp(prefix="agentmeter-tests-")
        config.stash[_OWN_RUN_DIR] = True


def pytest_unconfigure(config: pytest.Config) -> None:
    if _is_controller(config) and config.stash.get(_OWN_RUN_DIR, False):
        shared = Path(os.environ.pop(RUN_DIR_ENV))
        stop_shared_dockerd(shared)
        shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture(scope="session")
def local_backend() -> Iterator[LocalBackend]:
    if os.geteuid() != 0:
        warnings.warn("tests run as an ordinary user: local sandboxes run rootless", stacklevel=1)
    yield LocalBackend(progress=None)


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


# --- how the suite is spread over xdist's workers (pyproject: ``-n 3 --dist loadfile``) -------
#
# xdist's loadfile hands out whole files, the ones with the most tests first: the few long
# end-to-end tests (one or two per file) came last and ran one after another at the end while the
# other workers were idle, and the 18 real-CLI runs of test_agents_cli.py ran in a row on one
# worker. Here the longest units go first (longest-processing-time order), and the files below,
# whose tests share nothing but session fixtures, are split into one unit per test.

#: files whose tests are independent (no module- or class-scoped fixture, no order): one unit
#: of work per test
PER_TEST_FILES = frozenset({
    "test_agents_cli.py", "test_agents_cli_extra.py", "test_agents_openhands.py",
    "test_scenarios.py", "test_reward_forging.py", "test_runner.py", "test_clitools_suite.py",
    "test_difftest_engine.py", "test_harbor_shapes.py", "test_difftest_synth_build.py",
})
#: relative cost (seconds, ``--durations``) of the tests that take longest, by ``file::function``
#: or the full id of one parametrisation; every other test counts DEFAULT_COST. Only the order
#: matters, but a long test missing here is handed out last as if it took DEFAULT_COST and may
#: then run alone at the end of the suite while the other workers are idle (as test_run_lock.py,
#: 3 min, and test_oci_images.py, 3.5 min, could, costed 4.5 and 5): every test of 5 s or more
#: belongs here or in FILE_COST. Measured 2026-11-29, one file at a time (``-n 0``), 2 cores
#: shared with other work (load 10-30, at times more); entries marked * are older figures.
TEST_COST: dict[str, float] = {
    # the real agent CLIs (npm / PyPI installs in cached layers)
    "test_agents_cli.py::test_solver_passes_quitter_fails_and_usage_agrees[qwen-code]": 207,
    "test_agents_cli.py::test_solver_passes_quitter_fails_and_usage_agrees[mini-swe-agent]": 205,
    "test_agents_cli.py::test_solver_passes_quitter_fails_and_usage_agrees[kimi]": 103,
    "test_agents_cli.py::test_solver_passes_quitter_fails_and_usage_agrees[gemini-cli]": 83,
    "test_agents_cli.py::test_solver_passes_quitter_fails_and_usage_agrees[claude-code]": 73,
    "test_agents_cli.py::test_solver_passes_quitter_fails_and_usage_agrees[codex]": 64,
    "test_agents_cli.py::test_crash_and_garbage_output_are_agent_errors": 43,
    "test_agents_cli.py::test_cli_on_the_docker_backend": 18,
    "test_agents_cli.py::test_responses_and_messages_clients_through_chat_translation": 8,
    "test_agents_cli.py::test_real_timeout_of_a_cli": 7,
    "test_agents_cli.py::test_claude_code_calls_the_tasks_mcp_server_and_is_ended_after_completion": 6,
    "test_agents_cli_extra.py::test_opencode_solver_passes_quitter_fails_and_usage_agrees": 47,
    "test_agents_cli_extra.py::test_budget_refusal_ends_the_cli_and_keeps_its_logs[gemini-cli]": 34,
    "test_agents_cli_extra.py::test_budget_refusal_ends_the_cli_and_keeps_its_logs[qwen-code]": 13,
    "test_agents_cli_extra.py::test_opencode_api_error_is_an_agent_error": 27,
    "test_agents_openhands.py::test_openhands_solver_passes_quitter_fails_and_usage_agrees": 42,
    "test_agents_openhands.py::test_openhands_refused_model_call_is_an_agent_error": 25,
    "test_scenarios.py::test_cli_continues_its_session_across_steps_and_rounds[opencode]": 126,
    "test_scenarios.py::test_cli_continues_its_session_across_steps_and_rounds[qwen-code]": 90,
    "test_scenarios.py::test_cli_continues_its_session_across_steps_and_rounds[kimi]": 44,
    "test_scenarios.py::test_cli_continues_its_session_across_steps_and_rounds[claude-code]": 26,
    "test_local_model_real.py::test_native_agent_and_a_real_cli_on_a_starter_task": 110,  # *
    "test_local_model_real.py::test_a_judge_with_constrained_output_gives_a_usable_verdict": 65,  # *
    # whole suites and batteries of trials
    "test_harbor_shapes.py::test_every_shape_loads_and_checks[docker]": 110,
    "test_harbor_shapes.py::test_every_shape_loads_and_checks[local]": 13,
    "test_reward_forging.py::test_forging_solutions_score_zero_on_docker": 73,
    "test_reward_forging.py::test_forging_solutions_score_zero_on_every_starter_task": 17,
    "test_clitools_suite.py::test_csvq_oracle_scores_one_and_core_nop_fails_the_build": 63,
    "test_runner.py::test_starter_suite_oracle_nop_and_native_with_scripted_policies": 62,
    "test_runner.py::test_fixtures_pass_with_oracle_on_docker": 29,
    "test_runner.py::test_sigkill_mid_run_then_resume_runs_every_trial_exactly_once": 18,
    "test_runner.py::test_harbor_and_terminal_bench_fixtures_pass_with_oracle": 17,
    "test_runner.py::test_ctrl_c_stops_cleanly": 11,
    "test_scenarios.py::test_sigkill_mid_scenario_then_resume_counts_each_step_once": 28,
    "test_scenarios.py::test_user_sim_feedback_comes_from_the_judge_model_as_evaluation_cost": 16,
    "test_scenarios.py::test_solver_carries_the_workspace_and_learner_passes_after_feedback": 9,
    # difftest (CLI-generation tasks): every case runs the oracle and the candidate
    "test_difftest_engine.py::test_oracle_source_passes_and_empty_workspace_builds_nothing": 50,
    "test_difftest_engine.py::test_hostile_candidate_fails_only_the_cases_it_attacks": 47,
    "test_difftest_engine.py::test_hostile_candidate_on_docker": 43,
    "test_difftest_engine.py::test_scripted_solver_writes_the_reference_through_the_agents_shell": 35,
    "test_difftest_engine.py::test_judge_decides_sm_through_the_gateway_as_evaluation_cost": 23,
    "test_difftest_synth_build.py::test_model_assisted_synthesis_through_the_gateway": 49,
    "test_difftest_synth_build.py::test_from_help_drafts_the_schema_in_the_sandbox": 20,
    "test_difftest_synth_build.py::test_cli_replays_a_start_py": 5,
    "test_difftest_synth_build.py::test_oracle_run_filters_cases_and_renders_the_prompt": 12,
    # the gateway (both *)
    "test_gateway_persistence.py::test_sigkill_mid_trial_keeps_served_calls_and_resume_counts_them_once": 30,
    "test_gateway.py::test_gateway_serve_meters_any_client": 28,
    # the Ray cluster (one for the module) and PostgreSQL
    "test_ray_cluster.py::test_the_driver_killed_mid_run_then_resume_counts_everything_once": 101,
    "test_ray_cluster.py::test_a_grid_across_the_workers_gives_the_local_results_table": 50,
    "test_ray_cluster.py::test_a_worker_node_killed_mid_run_loses_and_double_counts_nothing": 39,
    "test_ray_cluster.py::test_a_node_without_the_sandbox_tools_is_named_before_anything_is_written": 30,
    "test_ray_cluster.py::test_the_nodes_register_with_their_slots": 28,
    "test_ray_cluster.py::test_no_cluster_or_a_sqlite_store_is_refused_before_anything_is_written": 16,
}
DEFAULT_COST = 0.5
#: seconds of whole files run as one unit (not in PER_TEST_FILES) whose many short tests add up
#: (measured as TEST_COST): their unit counts this, not the sum of its tests' costs
FILE_COST: dict[str, float] = {
    "test_oci_images.py": 216, "test_run_lock.py": 130, "test_task_images.py": 167,
    "test_store_shared.py": 83, "test_hostile_battery.py": 99, "test_network_proxy.py": 94,
    "test_difftest_cli.py": 64, "test_hostile_agent_content.py": 69,
    "test_agency_tictactoe.py": 58, "test_sandbox_docker.py": 57, "test_report_browser.py": 49,
    "test_browser_capture.py": 43, "test_report_difftest.py": 35,
    "test_separate_verifier.py": 31, "test_cli_commands.py": 27, "test_store_postgres.py": 26,
    "test_dockerfile_grammar.py": 24, "test_copy_caps.py": 24,
}


def unit_cost(nodeid: str) -> float:
    """The relative cost of one test, by its id (``tests/<file>::<function>[<params>]``)."""
    name = nodeid.rsplit("/", 1)[-1]
    return TEST_COST.get(name, TEST_COST.get(name.split("[", 1)[0], DEFAULT_COST))


def work_unit_cost(scope: str, nodeids: Any) -> float:
    """The relative cost of one unit of work: a single test, or a whole file."""
    return FILE_COST.get(scope.rsplit("/", 1)[-1]) or sum(unit_cost(t) for t in nodeids)


if LoadFileScheduling is not None:
    class LongestFirstScheduling(LoadFileScheduling):  # type: ignore[misc, valid-type]
        """loadfile, with the units of :data:`PER_TEST_FILES` single tests, and the costliest
        units handed out first."""

        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            self._ordered = False

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return nodeid if path.rsplit("/", 1)[-1] in PER_TEST_FILES else path

        def _assign_work_unit(self, node: Any) -> None:
            # the first assignment comes right after the whole queue is built (schedule())
            if not self._ordered:
                self._ordered = True
                units = sorted(self.workqueue.items(),
                               key=lambda unit: -work_unit_cost(unit[0], unit[1]))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "loadfile":
            return None  # another --dist asked for on the command line: xdist's own
        return LongestFirstScheduling(config, log)
