"""The ``pytest`` kind: reward from pytest's ``-rA`` short test summary (Terminal-Bench v1).

The task's test command (``run-tests.sh``) runs pytest with the offline toolkit first on its PATH
(see ``offline_pytest``); the reward is read from the summary in its stdout, not from a file.

The summary lines look like ``PASSED tests/test_x.py::test_a``,
``FAILED tests/test_x.py::test_b - AssertionError: ...``, ``ERROR tests/test_x.py - ImportError``,
``SKIPPED [1] tests/test_x.py:10: reason``, ``XFAIL ...``, ``XPASS ...``.
The reward is 1.0 iff at least one test passed and none failed or errored; ``fraction`` is the
passed share. Only a finished run counts: the short summary must be followed by pytest's closing
counts line (``==== 3 passed in 0.1s ====``), so a test process that exits early (``os._exit(0)``
from agent code) is no pass whatever its exit status. Tests that import agent code in the test
process can still forge that output: see docs/verifiers.md.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import ExecResult
from agentmeter.verify import offline_pytest
from agentmeter.verify.command import (
    Score,
    run_test_command,
    script_ending,
    stage_verifier,
    verdict_of,
)
from agentmeter.verify.protocol import SandboxNeeds, Verdict, VerifierContext

if TYPE_CHECKING:
    from agentmeter.tasks.models import Task

TestOutcome = Literal["passed", "failed", "error", "xfailed", "xpassed"]

_SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: pytest's last line: "==== 1 failed, 3 passed, 1 error in 0.10s ====" (counts, time optional)
_STATS = re.compile(r"^=+ (\d+ [a-z]+(?:, \d+ [a-z]+)*)(?: in [0-9.]+s.*?)? =+$")
_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(.*)$")
_PARAMETRIZED = re.compile(r"^(\S*?\[.*?\])(?:\s+-\s+.*)?$")
_WORD_TO_OUTCOME: dict[str, TestOutcome] = {
    "PASSED": "passed", "FAILED": "failed", "ERROR": "error", "XFAIL": "xfailed",
    "XPASS": "xpassed",
}
#: when a test is reported twice (a teardown error after a pass), the worse outcome wins
_SEVERITY: dict[TestOutcome, int] = {
    "xfailed": 0, "passed": 1, "xpassed": 1, "failed": 2, "error": 3,
}


class PytestResults(BaseModel):
    """Per-test outcomes parsed from one pytest run's output."""

    model_config = ConfigDict(frozen=True)

    outcomes: dict[str, TestOutcome]
    skipped: int = 0
    found_summary: bool = False
    #: pytest's own closing counts ("failed", "passed", "error", …), when its last line was seen
    stats: dict[str, int] | None = None

    @property
    def finished(self) -> bool:
        """pytest printed its short summary and its closing counts line after it: it ran to
        its end (a test process that exits early, e.g. ``os._exit(0)``, prints neither)."""
        return self.found_summary and self.stats is not None

    def count(self, *outcomes: TestOutcome) -> int:
        return sum(1 for o in self.outcomes.values() if o in outcomes)

    @property
    def passed(self) -> int:
        return self.count("passed", "xpassed")

    @property
    def failed(self) -> int:
        return self.count("failed", "error")

    @property
    def fraction(self) -> float:
        """Passed tests over tests that passed, failed or errored (0.0 when none ran)."""
        ran = self.passed + self.failed
        return self.passed / ran if ran else 0.0

    @property
    def reward(self) -> float:
        """1.0 iff at least one test passed and none failed or errored (by the summary lines
        and by pytest's closing counts)."""
        stats = self.stats or {}
        bad = stats.get("failed", 0) + stats.get("error", 0) + stats.get("errors", 0)
        return 1.0 if self.passed >= 1 and self.failed == 0 and bad == 0 else 0.0


def _test_name(rest: str) -> str:
    match = _PARAMETRIZED.match(rest)
    if match:
        return match.group(1)
    return rest.split(" - ", 1)[0].strip()


def parse_pytest_output(output: str) -> PytestResults:
    """Parse the short test summary of ``pytest -rA`` output (the last one if several)."""
    lines = [_ANSI.sub("", line).rstrip("\r") for line in output.splitlines()]
    headers = [i for i, line in enumerate(lines) if _SUMMARY_HEADER.match(line)]
    found = bool(headers)
    body = lines[headers[-1] + 1:] if headers else lines
    outcomes: dict[str, TestOutcome] = {}
    skipped = 0
    stats: dict[str, int] | None = None
    for line in body:
        if found and line.startswith("="):
            counts = _STATS.match(line)
            if counts:
                stats = {word: int(n) for n, word in
                         (part.split(" ", 1) for part in counts.group(1).split(", "))}
            break
        match = _LINE.match(line)
        if match is None:
            continue
        word, rest = match.groups()
        if word == "SKIPPED":
            skipped += 1
            continue
        name = _test_name(rest)
        if not found and "::" not in name:
            continue  # without a summary header only accept unmistakable node ids
        outcome = _WORD_TO_OUTCOME[word]
        previous = outcomes.get(name)
        if previous is None or _SEVERITY[outcome] > _SEVERITY[previous]:
            outcomes[name] = outcome
    return PytestResults(outcomes=outcomes, skipped=skipped, found_summary=found, stats=stats)


def score_pytest_output(output: str, ending: ExecResult | None = None) -> Score:
    """Reward (all passed: 1.0) and the passed fraction, from the test command's stdout. Without
    results the problem says how the test script ended (``ending``: its run), the real cause."""
    results = parse_pytest_output(output)
    cause = f" ({script_ending(ending)})" if ending is not None else ""
    if not results.outcomes:
        return Score(None, {}, f"the pytest output had no test results{cause}")
    if not results.finished:
        return Score(None, {}, "pytest did not finish: no short test summary followed by its "
                     f"closing counts line (a test process that exited early?){cause}")
    return Score(results.reward, {"fraction": results.fraction}, None)


class PytestOutputVerifier:
    """Runs the task's test command with the offline pytest toolkit and reads pytest's summary.

    The other Terminal-Bench parsers (``tb_parsers``) run the same way and differ in ``score``.
    """

    def sandbox_needs(self, task: Task) -> SandboxNeeds:
        return SandboxNeeds(mounts=(offline_pytest.toolkit_mount(),))

    async def stage(self, task: Task, sandbox: Sandbox) -> None:
        await stage_verifier(task, sandbox)

    def score(self, result: ExecResult) -> Score:
        return score_pytest_output(result.stdout, result)

    async def verify(self, task: Task, sandbox: Sandbox, ctx: VerifierContext) -> Verdict:
        # the image's PATH (its ENV PATH), behind the harness's tools
        image_path = (await sandbox.exec(["/bin/sh", "-c", 'printf %s "$PATH"'], user="root",
                                         timeout=30)).stdout.strip()
        run = await run_test_command(task, sandbox, ctx,
                                     env=offline_pytest.verifier_env(image_path or None),
                                     prepare=offline_pytest.PREPARE_HOME)
        return verdict_of(task, ctx, run, self.score(run.result))
