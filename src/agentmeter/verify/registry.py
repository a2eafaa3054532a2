"""Verifier kinds by name: the name a task gives (``[verifier] kind`` in task.toml) → its verifier.

A new kind is one module implementing ``agentmeter.verify.protocol.Verifier`` plus one line here.
Kinds are named by dotted path and imported when a verifier is made: loading a task (which checks
its kind) does not import every verifier's dependencies (the difftest funnel's numpy, say).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentmeter.verify.protocol import Verifier

VerifierFactory = Callable[[], "Verifier"]


def _lazy(target: str, *args: str) -> VerifierFactory:
    """A factory that imports ``module:Class`` when a verifier is made, and calls it with ``args``."""
    module, _, name = target.partition(":")

    def factory() -> Verifier:
        made: Verifier = getattr(importlib.import_module(module), name)(*args)
        return made

    return factory


_TB_PARSER = "agentmeter.verify.tb_parsers:TbParserVerifier"

_FACTORIES: dict[str, VerifierFactory] = {
    "reward-file": _lazy("agentmeter.verify.reward_file:RewardFileVerifier"),
    "pytest": _lazy("agentmeter.verify.pytest_output:PytestOutputVerifier"),
    "difftest": _lazy("agentmeter.verify.difftest.verifier:DifftestVerifier"),
    "rubric": _lazy("agentmeter.verify.rubric.verifier:RubricVerifier"),
    # Terminal-Bench's other parser names (task.yaml parser_name), one kind each
    "swebench": _lazy(_TB_PARSER, "swebench"),
    "sweperf": _lazy(_TB_PARSER, "sweperf"),
    "mlebench": _lazy(_TB_PARSER, "mlebench"),
    "swelancer": _lazy(_TB_PARSER, "swelancer"),
}


def verifier_kinds() -> list[str]:
    return sorted(_FACTORIES)


class UnknownVerifierError(ValueError):
    pass


def make_verifier(kind: str) -> Verifier:
    factory = _FACTORIES.get(kind)
    if factory is None:
        raise UnknownVerifierError(
            f"unknown verifier kind {kind!r} (known: {', '.join(verifier_kinds())})")
    return factory()
