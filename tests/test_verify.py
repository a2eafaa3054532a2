"""Verifier kinds: the registry and the reward-file contract (the pytest summary parser is tested
in test_tasks_loading.py; both kinds run end to end in test_runner.py)."""

from __future__ import annotations

import pytest

from agentmeter.verify.registry import UnknownVerifierError, make_verifier, verifier_kinds
from agentmeter.verify.reward_file import REWARD_JSON, REWARD_TXT, parse_reward_files


def test_registry_names_the_built_in_kinds() -> None:
    assert verifier_kinds() == ["difftest", "mlebench", "pytest", "reward-file", "rubric",
                                "swebench", "swelancer", "sweperf"]
    with pytest.raises(UnknownVerifierError, match=r"unknown verifier kind 'rubrik' "
                       r"\(known: difftest, mlebench, pytest, reward-file, rubric, swebench, "
                       r"swelancer, sweperf\)"):
        make_verifier("rubrik")


@pytest.mark.parametrize(("txt", "js", "expected"), [
    (b"0.75\n", None, (0.75, {}, None)),
    (b"1", b'{"reward": 0.0}', (1.0, {}, None)),  # reward.txt wins
    (None, b'{"reward": 0.5, "build": 1}', (0.5, {"reward": 0.5, "build": 1.0}, None)),
    (None, b'{"a": 1, "b": 0}', (0.5, {"a": 1.0, "b": 0.0}, None)),  # no "reward": the mean
    (b"yes", None, (None, {}, f"{REWARD_TXT} is not a number: b'yes'")),
    (b"inf", None, (None, {}, f"{REWARD_TXT} is not finite")),
    (None, b"[1, 2]", (None, {}, f"{REWARD_JSON} is not an object of numbers")),
    (None, b"{}", (None, {}, f"{REWARD_JSON} is empty")),
    # non-finite: NaN/Infinity (json takes them), strings float() takes, a mean that overflows
    *((None, js, (None, {}, f"{REWARD_JSON} holds a number that is not finite"))
      for js in (b'{"reward": NaN}', b'{"reward": "inf"}', b'{"a": 1e308, "b": 1e308}')),
    (None, b"[" * 100_000, (None, {}, f"{REWARD_JSON} is not an object of numbers")),
    # an integer float() cannot take (OverflowError, not ValueError)
    (None, b'{"reward": 1' + b"0" * 400 + b"}",
     (None, {}, f"{REWARD_JSON} is not an object of numbers")),
    (None, None, (None, {}, f"the verifier wrote neither {REWARD_TXT} nor {REWARD_JSON}")),
])
def test_reward_files(txt: bytes | None, js: bytes | None,
                      expected: tuple[float | None, dict[str, float], str | None]) -> None:
    assert tuple(parse_reward_files(txt, js)) == expected
