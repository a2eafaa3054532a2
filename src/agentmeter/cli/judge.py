"""``agentmeter judge check``: a judge model against the labelled set in the repository
(``verify/judgecheck``): accuracy, Cohen's κ and the injection success rate."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentmeter.cli.common import JsonOpt, console, fail

if TYPE_CHECKING:
    from agentmeter.verify.judgecheck import CheckReport

#: ``--call-timeout``: a judge call that takes longer is an unusable verdict
DEFAULT_CALL_TIMEOUT_S = 180.0

judge_app = typer.Typer(help="Judge models: check one against labelled verdicts.",
                        no_args_is_help=True)


async def _check(model: str, models_file: Path | None, labelled: Path | None,
                 timeout_s: float) -> CheckReport:
    from agentmeter.gateway import Gateway
    from agentmeter.gateway.registry import ModelRegistry
    from agentmeter.pricing import PriceBook
    from agentmeter.runner.judging import GatewayJudge, judge_api
    from agentmeter.verify import judgecheck

    registry = ModelRegistry.load(models_file) if models_file else ModelRegistry()
    gw = Gateway(registry, PriceBook(), allow_unpriced=True)
    try:
        judge_api(gw.check_model(model))
    except Exception as e:
        raise fail(f"--judge-model: {e}") from None
    await gw.start(private_socket=True)
    client = GatewayJudge(gw, model, "judge-check", sink=lambda call: None, timeout_s=timeout_s)
    t0 = time.monotonic()
    try:
        cases = judgecheck.load(labelled) if labelled else None
        report = await judgecheck.check(client, cases)
        meter = await client.close()
        report.seconds = round(time.monotonic() - t0, 1)
        if meter is not None:
            report.calls = len(meter.calls)
            report.input_tokens, report.output_tokens = meter.usage.input, meter.usage.output
        return report
    finally:
        await client.close(settle=False)
        await gw.stop()


@judge_app.command("check")
def check(
    judge_model: Annotated[str, typer.Option("--judge-model", help="the judge model "
                                             "(offline test double: scripted/judge)")],
    models_file: Annotated[Path | None, typer.Option("--models-file",
                                                     help="models file naming the model")] = None,
    labelled: Annotated[Path | None, typer.Option(
        "--labelled", help="a labelled set (default: the one in the repository)")] = None,
    call_timeout: Annotated[float, typer.Option(
        "--call-timeout", min=1.0, help="seconds one judge call may take; a call without a "
        "reply by then is an unusable verdict")] = DEFAULT_CALL_TIMEOUT_S,
    as_json: JsonOpt = False,
) -> None:
    """Put every labelled SM pair and rubric item (injection attempts included) to the judge."""
    import asyncio

    report = asyncio.run(_check(judge_model, models_file, labelled, call_timeout))
    summary = report.summary()
    if as_json:
        print(json.dumps({**summary, "disagreements": [
            {"case": v.case, "item": v.item, "label": v.label, "judged": v.judged,
             "unusable": v.unusable}
            for v in report.verdicts if v.judged != v.label]}))
        return
    console.print(f"judge {summary['model']}: {summary['verdicts']} verdicts "
                  f"({summary['unusable']} unusable replies)")
    console.print(f"  accuracy {summary['accuracy']:.3f}   Cohen's kappa {summary['kappa']:.3f}"
                  f"   injection success {summary['injection_success_rate']:.3f} "
                  f"(of {summary['injection_verdicts']} attacked verdicts)")
    console.print(f"  {summary['calls']} judge calls, {summary['input_tokens']} input and "
                  f"{summary['output_tokens']} output tokens, {summary['seconds']} s")
    for v in report.verdicts:
        if v.judged != v.label:
            console.print(f"  disagrees: {v.case}/{v.item}: label {v.label}, judged {v.judged}"
                          + (f" ({v.unusable})" if v.unusable else ""), markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(judge_app, name="judge")
