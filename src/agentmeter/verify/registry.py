"""Verifier kinds by name: the name a task gives (``[verifier] kind`` in task.toml) → its verifier.

A new built-in kind is one module implementing ``agentmeter.verify.protocol.Verifier`` plus one
line here. Kinds are named by dotted path and imported when a verifier is made: loading a task
(which checks its kind) does not import every verifier's dependencies (the difftest funnel's
numpy, say).

A kind from outside the tree needs no line here: ``kind = "package.module:Class"`` in task.toml,
or an installed package's entry point in group ``agentmeter.verifiers``; its factory is called
with no arguments. It may say its default pass threshold (``default_pass_threshold``, a class
attribute; else 1.0). docs/plugins.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentmeter import plugins

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
    """Built-in kinds and those installed as entry points."""
    return sorted({*_FACTORIES, *plugins.entry_point_names("verifier kind")})


class UnknownVerifierError(ValueError):
    pass


def kind_problem(kind: str) -> str | None:
    """Why ``kind`` names no verifier kind (None: it does). A plug-in entry point is not
    imported; an import path is (the only way to know it is there)."""
    return plugins.name_problem("verifier kind", kind, _FACTORIES, verifier_kinds,
                                "package.module:Class", cwd=False)


def default_pass_threshold(kind: str) -> float | None:
    """A plug-in kind's own default pass threshold (its ``default_pass_threshold``), if any;
    None for built-in kinds (the task models hold theirs) and kinds that say none."""
    if kind in _FACTORIES:
        return None
    try:
        target = plugins.lookup("verifier kind", kind, cwd=False)
    except plugins.PluginError:
        return None
    value = getattr(target, "default_pass_threshold", None)
    return float(value) if isinstance(value, int | float) and 0 <= value <= 1 else None


def make_verifier(kind: str) -> Verifier:
    factory = _FACTORIES.get(kind)
    if factory is not None:
        return factory()
    target = plugins.lookup("verifier kind", kind, cwd=False)  # a task's name
    if target is None:
        raise UnknownVerifierError(
            f"unknown verifier kind {kind!r} (known: {', '.join(verifier_kinds())})")
    try:
        made: Verifier = target()
    except Exception as e:
        raise plugins.PluginError(f"verifier kind {kind!r}: calling it failed: "
                                  f"{type(e).__name__}: {e}") from None
    missing = [a for a in ("sandbox_needs", "stage", "verify") if not hasattr(made, a)]
    if missing:
        raise plugins.PluginError(f"verifier kind {kind!r}: {type(made).__name__} does not "
                                  f"implement the Verifier protocol (missing: {', '.join(missing)})")
    return made
