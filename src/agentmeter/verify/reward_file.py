"""The ``reward-file`` kind: Harbor's test-script reward contract.

The task's ``tests/test.sh`` runs as root after the agent (see ``command``) and writes its reward to
``/logs/verifier/reward.txt`` (one number) or ``/logs/verifier/reward.json`` (an object of named
numbers; ``reward`` is its ``"reward"`` key, else the mean of its values). ``reward.txt`` wins
when both exist. Each is read up to ``REWARD_MAX_BYTES``; a larger one gives no reward.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from agentmeter.sandbox.archive import CopyTooLarge
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import SandboxError
from agentmeter.verify.command import (
    VERIFIER_LOGS_DIR,
    Score,
    run_test_command,
    script_ending,
    stage_verifier,
    verdict_of,
)
from agentmeter.verify.protocol import SandboxNeeds, Verdict, VerifierContext

if TYPE_CHECKING:
    from agentmeter.tasks.models import Task

REWARD_TXT = f"{VERIFIER_LOGS_DIR}/reward.txt"
REWARD_JSON = f"{VERIFIER_LOGS_DIR}/reward.json"
#: the most of a reward file that is read; a larger one is a problem, not a reward
REWARD_MAX_BYTES = 64 << 10


def parse_reward_files(reward_txt: bytes | None, reward_json: bytes | None) -> Score:
    """The reward in what the test script left behind (``None`` for a file it did not write)."""
    if reward_txt is not None:
        try:
            value = float(reward_txt.decode().strip())
        except ValueError:
            return Score(None, {}, f"{REWARD_TXT} is not a number: {reward_txt[:80]!r}")
        if not math.isfinite(value):
            return Score(None, {}, f"{REWARD_TXT} is not finite")
        return Score(value, {}, None)
    if reward_json is not None:
        try:
            named = {k: float(v) for k, v in json.loads(reward_json).items()}
        except (ValueError, AttributeError, TypeError, OverflowError, RecursionError):
            return Score(None, {}, f"{REWARD_JSON} is not an object of numbers")
        if not named:
            return Score(None, {}, f"{REWARD_JSON} is empty")
        reward = named.get("reward", sum(named.values()) / len(named))
        if not all(map(math.isfinite, (reward, *named.values()))):  # NaN, "inf", 1e308 + 1e308
            return Score(None, {}, f"{REWARD_JSON} holds a number that is not finite")
        return Score(reward, named, None)
    return Score(None, {}, f"the verifier wrote neither {REWARD_TXT} nor {REWARD_JSON}")


async def _read_if_present(sandbox: Sandbox, path: str, problems: list[str]) -> bytes | None:
    try:
        # written by the verifier (root); a symlink there is refused, never followed
        return await sandbox.read_file(path, max_bytes=REWARD_MAX_BYTES, user="root")
    except CopyTooLarge as e:
        problems.append(str(e))
        return None
    except SandboxError:
        return None


class RewardFileVerifier:
    """Runs the task's test command and reads the reward file it wrote."""

    def sandbox_needs(self, task: Task) -> SandboxNeeds:
        return SandboxNeeds()

    async def stage(self, task: Task, sandbox: Sandbox) -> None:
        await stage_verifier(task, sandbox)

    async def verify(self, task: Task, sandbox: Sandbox, ctx: VerifierContext) -> Verdict:
        run = await run_test_command(task, sandbox, ctx)
        problems: list[str] = []
        txt = await _read_if_present(sandbox, REWARD_TXT, problems)
        js = await _read_if_present(sandbox, REWARD_JSON, problems)
        score = parse_reward_files(txt, js)
        if problems:  # an oversized reward file is never read, and never a pass
            score = Score(None, {}, "; ".join(problems))
        elif txt is None and js is None:  # the script never got to its reward: say why
            score = score._replace(problem=f"{score.problem} ({script_ending(run.result)})")
        return verdict_of(task, ctx, run, score)
