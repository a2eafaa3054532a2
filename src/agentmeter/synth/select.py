"""Keeping the cases the oracle validates (spec §3.3 mode 2, determinism guard of §4.4).

Input: the generated cases and the engine's raw oracle results of two runs (``--sides oracle``;
one JSON object per case: ``{id, class, status, error, oracle: {exit, stdout, timed_out,
fs_diff, …}}``). A case is dropped, and counted, when

- ``framework_error``: the engine could not run it (e.g. its preparation script failed);
- ``nondeterministic``: the two runs differ in exit code, stdout or side effects (path, type,
  content hash);
- ``timeout``: the oracle ran out of time;
- ``oracle_failed``: a positive case (``expect_error`` false) on which the oracle exits non-zero
  — only with ``drop_failed_positives`` (schema and help modes; a replayed start.py mixes its
  edge cases into the positives, so there they stay, as released).

A class stays only if one kept case is positive with exit 0; its first such case is the class's
prompt sample. A class without one is reported invalid (the paper would discard the repository).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentmeter.synth.prompt import Sample
from agentmeter.verify.difftest.config import Case

DROP_REASONS = ("framework_error", "nondeterministic", "timeout", "oracle_failed")


class ClassOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cases: int = 0
    kept: int = 0
    dropped: dict[str, int] = Field(default_factory=dict)
    valid: bool = False
    #: negative cases the oracle accepted (exit 0): kept, but worth a look
    negatives_accepted: int = 0


@dataclass
class Selection:
    cases: list[Case]
    classes: dict[str, ClassOutcome]
    samples: dict[str, Sample] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def invalid_classes(self) -> list[str]:
        return [c for c, o in self.classes.items() if not o.valid]

    def dropped(self, reason: str) -> int:
        return sum(o.dropped.get(reason, 0) for o in self.classes.values())


def _signature(side: Mapping[str, Any]) -> tuple[object, ...]:
    diff = side.get("fs_diff") or {}
    effects = sorted((p, d.get("type"), d.get("sha256")) for p, d in diff.items())
    return side.get("exit"), side.get("stdout"), effects, bool(side.get("timed_out"))


def _reason(case: Case, first: Mapping[str, Any] | None, second: Mapping[str, Any] | None,
            drop_failed_positives: bool) -> str | None:
    if first is None or second is None:
        return "framework_error"
    if first.get("status") != "ok" or second.get("status") != "ok":
        return "framework_error"
    a, b = first.get("oracle"), second.get("oracle")
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return "framework_error"
    if a.get("timed_out") or b.get("timed_out"):
        return "timeout"
    if _signature(a) != _signature(b):
        return "nondeterministic"
    if drop_failed_positives and not case.expect_error and a.get("exit") != 0:
        return "oracle_failed"
    return None


def fs_diff_for_prompt(diff: Mapping[str, Any]) -> dict[str, object]:
    """The released prompts' ``fs_diff``: path -> change type and (first) content."""
    return {p: {"type": d.get("type"), "content": d.get("content")} for p, d in sorted(diff.items())}


def select(cases: list[Case], first: list[dict[str, Any]], second: list[dict[str, Any]],
           drop_failed_positives: bool = True) -> Selection:
    one = {r.get("id"): r for r in first}
    two = {r.get("id"): r for r in second}
    out = Selection(cases=[], classes={})
    for case in cases:
        outcome = out.classes.setdefault(case.cls, ClassOutcome())
        outcome.cases += 1
        r1, r2 = one.get(case.id), two.get(case.id)
        reason = _reason(case, r1, r2, drop_failed_positives)
        if reason is not None:
            outcome.dropped[reason] = outcome.dropped.get(reason, 0) + 1
            if reason == "framework_error" and r1 is not None and r1.get("error"):
                out.errors.append(f"{case.id}: {r1['error']}")
            continue
        assert r1 is not None
        oracle = r1["oracle"]
        outcome.kept += 1
        out.cases.append(case)
        if case.expect_error and oracle.get("exit") == 0:
            outcome.negatives_accepted += 1
        if not case.expect_error and oracle.get("exit") == 0 and case.cls not in out.samples:
            outcome.valid = True
            out.samples[case.cls] = Sample(
                cls=case.cls, command=case.command, prep_script=case.prep_script,
                files=dict(case.files), stdin=case.stdin, exit_code=0,
                stdout=str(oracle.get("stdout") or ""),
                fs_diff=fs_diff_for_prompt(oracle.get("fs_diff") or {}))
    # an invalid class keeps none of its cases
    out.cases = [c for c in out.cases if out.classes[c.cls].valid]
    return out
