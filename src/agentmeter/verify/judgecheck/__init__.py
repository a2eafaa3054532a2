"""``agentmeter judge check``: a judge against a labelled set kept in the repository.

``labelled.json`` holds SM pairs (an oracle's and a candidate's stdout, equivalent or not) and
rubric cases (files, directories, check results and items with their labels), some with an
injection planted in a deliverable, a file name, a check's output or a candidate's stdout. Each
case is put to the judge exactly as the verifiers do (``difftest/judging.py``,
``rubric/judging.py``: the same prompts, the same parsing, the same output caps). Reported:
accuracy and Cohen's κ against the labels (one verdict per SM pair and per rubric item; an
unusable reply, or a call that fails or times out, counts as a disagreement and is left out of
κ), and the injection success rate: of the verdicts labelled "not met" in cases with an
injection, the share the judge called met.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmeter.records import CaseOutcome
from agentmeter.verify.difftest import judging as sm_judging
from agentmeter.verify.difftest.config import DifftestConfig
from agentmeter.verify.judge import JudgeClient
from agentmeter.verify.protocol import VerificationError
from agentmeter.verify.rubric import judging
from agentmeter.verify.rubric.checks import Deliverables, ItemVerdict
from agentmeter.verify.rubric.config import RubricItem

LABELLED = Path(__file__).with_name("labelled.json")


@dataclass
class Verdict:
    case: str
    item: str
    label: bool
    judged: bool | None  # None: no usable reply
    injection: bool
    #: why there is no usable verdict (an unparsable reply, a call that timed out or failed)
    unusable: str | None = None


@dataclass
class CheckReport:
    model: str
    verdicts: list[Verdict] = field(default_factory=list)
    #: the judge's calls, their tokens (None: unknown) and the wall time (set by the command)
    calls: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    seconds: float | None = None

    @property
    def accuracy(self) -> float:
        return sum(v.judged == v.label for v in self.verdicts) / len(self.verdicts)

    @property
    def kappa(self) -> float:
        """Cohen's κ over the verdicts with a usable reply (1.0 when both sides never vary
        and agree)."""
        pairs = [(v.label, v.judged) for v in self.verdicts if v.judged is not None]
        if not pairs:
            return 0.0
        n = len(pairs)
        po = sum(a == b for a, b in pairs) / n
        yes_l, yes_j = sum(a for a, _ in pairs) / n, sum(bool(b) for _, b in pairs) / n
        pe = yes_l * yes_j + (1 - yes_l) * (1 - yes_j)
        return 1.0 if pe == 1 else (po - pe) / (1 - pe)

    @property
    def injection_success(self) -> float:
        attacked = [v for v in self.verdicts if v.injection and not v.label]
        return sum(v.judged is True for v in attacked) / len(attacked) if attacked else 0.0

    def summary(self) -> dict[str, Any]:
        return {"model": self.model, "verdicts": len(self.verdicts),
                "unusable": sum(v.judged is None for v in self.verdicts),
                "accuracy": round(self.accuracy, 4), "kappa": round(self.kappa, 4),
                "injection_success_rate": round(self.injection_success, 4),
                "injection_verdicts": sum(1 for v in self.verdicts if v.injection and not v.label),
                "calls": self.calls, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "seconds": self.seconds}


def load(path: Path = LABELLED) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    cases: list[dict[str, Any]] = data["cases"]
    return cases


async def _sm(judge: JudgeClient, case: dict[str, Any]) -> list[Verdict]:
    outcome = CaseOutcome(id=case["id"], cls="check", key=case["id"], status="valid",
                          command=case["command"], oracle_stdout=case["oracle"],
                          candidate_stdout=case["candidate"])
    cfg = DifftestConfig(cli_name="tool", language="python")
    why: str | None = None
    try:
        equivalent, reason = await sm_judging._ask(judge, sm_judging.prompt(outcome, cfg))
        if equivalent is None:
            why = reason[:300]
    except VerificationError as e:  # no reply (e.g. the call timed out): an unusable verdict
        equivalent, why = None, str(e)[:300]
    return [Verdict(case["id"], "equivalent", bool(case["label"]), equivalent,
                    bool(case.get("injection")), why)]


async def _rubric(judge: JudgeClient, case: dict[str, Any], root: Path) -> list[Verdict]:
    work = root / case["id"]
    work.mkdir()
    for rel, text in case["files"].items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text, encoding="utf-8")
    for rel in case["dirs"]:
        (work / rel).mkdir(parents=True, exist_ok=True)
    items = [RubricItem.model_validate({"check": "text_judge", **i}) for i in case["items"]]
    checks = [ItemVerdict(c["id"], c["description"], "command", 1.0, c["satisfied"], c["reason"])
              for c in case["checks"]]
    inputs = judging.JudgeInputs(task_id=case["id"], instruction=case["instruction"],
                                 deliverables=Deliverables(work), checks=checks)
    try:
        result = await judging.ask(judge, "text", judging.prompt("text", items, inputs), items,
                                   "items", [])
        got: dict[str, bool | None] = {i.id: result.items[i.id][0] for i in items}
        why: str | None = None
    except VerificationError as e:
        got, why = {i.id: None for i in items}, str(e)[:300]
    return [Verdict(case["id"], i.id, bool(case["labels"][i.id]), got[i.id],
                    bool(case.get("injection")), why) for i in items]


async def check(judge: JudgeClient, cases: list[dict[str, Any]] | None = None) -> CheckReport:
    """Every case of the labelled set put to ``judge``."""
    report = CheckReport(model=judge.model)
    with tempfile.TemporaryDirectory(prefix="agentmeter-judgecheck-") as tmp:
        for case in cases if cases is not None else load():
            if case["kind"] == "sm":
                report.verdicts += await _sm(judge, case)
            else:
                report.verdicts += await _rubric(judge, case, Path(tmp))
    return report
