"""``agentmeter difftest synth``: build a CLI-generation task's frozen cases (and its prompt).

Sources (one): ``TASK_DIR/schema.json`` (default), a released ``start.py`` replayed, or the
oracle's ``--help`` walked in the task's environment (the draft schema is written to
``schema.json`` when there is none, else to ``schema.draft.json``). The cases are run against
the oracle twice in the task's environment (unless ``oracle=False``) and filtered as select.py
says; ``tests/cases.jsonl`` is written atomically and ``tests/synth.json`` records the seed, the
counts, the dropped cases by reason, the invalid classes, the prompt samples and the help text.
``prompt=True`` renders ``instruction.md`` from them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentmeter.paths import write_atomic
from agentmeter.synth import assist
from agentmeter.synth import generate as gen
from agentmeter.synth.assist import ModelUse
from agentmeter.synth.helpwalk import HelpError, draft_values, walk
from agentmeter.synth.oracle import OracleSandbox, load_for_synthesis
from agentmeter.synth.prompt import PromptInput, Sample, render
from agentmeter.synth.replay import replay
from agentmeter.synth.schema import Schema, SchemaError, dump_schema, load_schema
from agentmeter.synth.select import ClassOutcome, select
from agentmeter.verify.difftest.config import Case, DifftestConfig, write_cases
from agentmeter.verify.judge import JudgeMessage

Mode = Literal["schema", "help", "start_py", "model"]
SYNTH_JSON = "synth.json"


class SynthRecord(BaseModel):
    """``tests/synth.json``: how the frozen cases were made."""

    model_config = ConfigDict(extra="forbid")

    mode: Mode
    source: str
    seed: int
    per_class: int
    generated: int
    duplicates: int = 0
    generation_skipped: int = 0
    generation_errors: list[str] = Field(default_factory=list)
    oracle_checked: bool
    cases: int
    dropped: dict[str, int] = Field(default_factory=dict)
    classes: dict[str, ClassOutcome] = Field(default_factory=dict)
    invalid_classes: list[str] = Field(default_factory=list)
    samples: dict[str, Sample] = Field(default_factory=dict)
    help: dict[str, str] = Field(default_factory=dict)
    #: the replayed adapter overrides sanitize_stdout: set stdout_sanitizers to match
    custom_sanitizer: bool = False
    #: model-assisted mode: the auxiliary model's rounds and cost (task construction)
    model: ModelUse | None = None
    #: help mode: the schema file written and its placeholder values to edit (``class ›
    #: param: values``; helpwalk.draft_values)
    schema_file: str | None = None
    draft_values: list[str] = Field(default_factory=list)


class SynthError(RuntimeError):
    """Synthesis cannot go on (one line)."""


def placeholder_hint(target: Path, schema: Schema, shown: int = 8) -> str:
    """Where the drafted schema is and which of its values are placeholders to edit: the
    value pools drafted from --help are generic (paths into the draft fixtures, words, small
    numbers); edit them, and the fixtures, in ``target``, then rerun ``difftest synth`` on the
    task (schema mode: no --from-help)."""
    drafts = draft_values(schema)
    listed = "; ".join(drafts[:shown]) + (f"; … {len(drafts) - shown} more"
                                          if len(drafts) > shown else "")
    return (f"the schema drafted from --help is {target} with placeholder values: edit the "
            f"parameters' \"values\" (and \"fixtures\") there so the oracle accepts them, then "
            f"run `agentmeter difftest synth {target.parent}` (without --from-help)"
            + (f"; drafted values: {listed}" if drafts else ""))


def _schema_target(task_dir: Path) -> Path:
    """Where a drafted schema goes: schema.json, or schema.draft.json beside an existing one."""
    return task_dir / ("schema.json" if not (task_dir / "schema.json").exists()
                       else "schema.draft.json")


def _class_errors(cases: list[Case], results: list[dict[str, Any]]) -> dict[str, str]:
    """The oracle's first error per class (for the model's feedback)."""
    errors: dict[str, str] = {}
    for case, r in zip(cases, results, strict=False):
        side = r.get("oracle") or {}
        if case.cls not in errors and not case.expect_error and side.get("exit") not in (0, None):
            errors[case.cls] = (f"`{case.command}` exited {side.get('exit')}: "
                                f"{str(side.get('stderr') or side.get('stdout'))[-300:]}")
        elif case.cls not in errors and r.get("status") == "framework_error":
            errors[case.cls] = f"the preparation failed: {str(r.get('error'))[-300:]}"
    return errors


async def _assisted(box: OracleSandbox, task_dir: Path, model: str, help_text: dict[str, str],
                    seed: int, per_class: int, max_refinements: int) -> tuple[Schema, ModelUse]:
    """The model's schema, refined by execution feedback (assist.py)."""
    from agentmeter.gateway import Gateway, ScriptedContext
    from agentmeter.gateway.registry import ModelRegistry
    from agentmeter.pricing import PriceBook
    from agentmeter.runner.judging import GatewayJudge, judge_api
    from agentmeter.verify.protocol import VerificationError

    cfg = box.cfg
    gw = Gateway(ModelRegistry(), PriceBook(), allow_unpriced=True)
    try:
        judge_api(gw.check_model(model))
    except Exception as e:
        raise SynthError(f"--model: {e}") from None
    existing = task_dir / "schema.json"
    double = ScriptedContext(solution_script=existing.read_text() if existing.is_file() else None)
    await gw.start(private_socket=True)
    client = GatewayJudge(gw, model, "synth", sink=lambda call: None, scripted=double)
    use = ModelUse(model=model)
    try:
        old = load_schema(existing) if existing.is_file() else None
        messages = assist.first_prompt(cfg.oracle_name, old.overview if old else "", help_text)
        while True:
            schema = await assist.ask(client, messages, use, max_refinements)
            cases = gen.generate(schema, seed, per_class).cases
            first = await box.run_cases(cases, 1) if cases else []
            errors = _class_errors(cases, first)
            working = {c.cls for c, r in zip(cases, first, strict=False)
                       if (r.get("oracle") or {}).get("exit") == 0 and not c.expect_error}
            invalid = [c.name for c in schema.classes if c.name not in working]
            if not invalid or use.rounds > max_refinements:
                break
            feedback = assist.class_feedback(invalid, errors)
            use.feedback.append(feedback)
            messages.append(JudgeMessage(role="user", content=(feedback,)))
    except (VerificationError, SchemaError) as e:
        raise SynthError(f"model-assisted synthesis with {model}: {e}") from None
    finally:
        meter = await client.close()
        await gw.stop()
        if meter is not None:
            use.calls, use.cost_usd = len(meter.calls), meter.cost_usd
            use.usage = meter.usage.model_dump()
    return schema, use


async def _synth(task_dir: Path, mode: Mode, seed: int, per_class: int, start_py: Path | None,
                 oracle: bool, backend: str, model: str | None = None,
                 max_refinements: int = assist.DEFAULT_MAX_REFINEMENTS,
                 ) -> tuple[SynthRecord, Schema | None, DifftestConfig]:
    task = load_for_synthesis(task_dir)
    assert task.difftest is not None
    cfg = task.difftest
    schema: Schema | None = None
    cases: list[Case] = []
    rec = SynthRecord(mode=mode, source="", seed=seed, per_class=per_class, generated=0,
                      oracle_checked=oracle, cases=0)
    if mode == "schema":
        schema = load_schema(task_dir / "schema.json")
        rec.source = "schema.json"
    elif mode == "start_py":
        assert start_py is not None
        got = replay(start_py, seed)
        cases, rec.source, rec.generated = got.cases, str(start_py), len(got.cases)
        rec.generation_skipped, rec.generation_errors = got.skipped, got.errors
        rec.custom_sanitizer = got.custom_sanitizer
    if mode in ("help", "model") or oracle:
        async with OracleSandbox(task, backend) as box:
            runner = box.sync_runner(asyncio.get_running_loop())
            try:
                walked = await asyncio.to_thread(walk, runner, [cfg.oracle_name])
                rec.help = walked.help
            except HelpError as e:
                if mode in ("help", "model"):
                    raise SynthError(str(e)) from None
                rec.generation_errors.append(f"help: {e}")
                walked = None
            if mode == "help":
                assert walked is not None
                schema = walked.schema
                target = _schema_target(task_dir)
                write_atomic(target, dump_schema(schema))
                rec.source = f"--help ({target.name})"
                rec.schema_file, rec.draft_values = str(target), draft_values(schema)
            if mode == "model":
                assert model is not None
                schema, rec.model = await _assisted(box, task_dir, model, rec.help, seed,
                                                    per_class, max_refinements)
                target = _schema_target(task_dir)
                write_atomic(target, dump_schema(schema))
                rec.source = f"{model} ({target.name}, {rec.model.rounds} rounds)"
            if schema is not None:
                made = gen.generate(schema, seed, per_class)
                cases, rec.duplicates = made.cases, made.duplicates
            rec.generated = len(cases)
            if oracle:
                first = await box.run_cases(cases, 1)
                second = await box.run_cases(cases, 2)
                sel = select(cases, first, second, drop_failed_positives=mode != "start_py")
                cases = sel.cases
                rec.classes, rec.samples = sel.classes, sel.samples
                rec.invalid_classes = sel.invalid_classes
                rec.dropped = {r: n for r in ("framework_error", "nondeterministic", "timeout",
                                              "oracle_failed") if (n := sel.dropped(r))}
                rec.generation_errors += sel.errors[:50]
    elif schema is not None:
        made = gen.generate(schema, seed, per_class)
        cases, rec.duplicates, rec.generated = made.cases, made.duplicates, len(made.cases)
    if not cases:
        hint = ""
        if mode == "help" and schema is not None and rec.schema_file:
            hint = "; " + placeholder_hint(Path(rec.schema_file), schema)
        raise SynthError(f"{task_dir}: no case left (invalid classes: "
                         f"{', '.join(rec.invalid_classes) or 'none'}){hint}")
    rec.cases = len(cases)
    tests = task_dir / "tests"
    tests.mkdir(exist_ok=True)
    write_cases(tests / cfg.cases, cases)
    write_atomic(tests / SYNTH_JSON, rec.model_dump_json(indent=1) + "\n")
    return rec, schema, cfg


def synthesize(task_dir: Path, *, mode: Mode = "schema", seed: int = 0,
               per_class: int = gen.DEFAULT_PER_CLASS, start_py: Path | None = None,
               oracle: bool = True, backend: str = "local", model: str | None = None,
               max_refinements: int = assist.DEFAULT_MAX_REFINEMENTS) -> SynthRecord:
    rec, _, _ = asyncio.run(_synth(task_dir, mode, seed, per_class, start_py, oracle, backend,
                                   model, max_refinements))
    return rec


def render_instruction(task_dir: Path) -> str:
    """Render ``instruction.md`` from ``tests/synth.json`` (samples, help) and the schema's
    overview, class descriptions and scrub map; returns the text written."""
    task = load_for_synthesis(task_dir)
    assert task.difftest is not None
    cfg = task.difftest
    rec = SynthRecord.model_validate_json((task_dir / "tests" / SYNTH_JSON).read_text())
    if not rec.samples:
        raise SynthError(f"{task_dir}/tests/{SYNTH_JSON}: no verified sample (run synth with "
                         "the oracle first)")
    schema = load_schema(task_dir / "schema.json") if (task_dir / "schema.json").is_file() else None
    scrub = dict(schema.scrub) if schema else {}
    if cfg.oracle_name != cfg.cli_name:
        scrub.setdefault(cfg.oracle_name, cfg.cli_name)
    order = list(rec.classes) or list(rec.samples)
    text = render(PromptInput(
        cli_name=cfg.cli_name, repo_name=cfg.cli_name, language=cfg.language,
        install=cfg.install or "", cwd=cfg.cwd or "/test_data", overview=schema.overview if schema else "",
        help_text="\n".join(f"$ {cmd} --help\n{text.rstrip()}\n" for cmd, text in rec.help.items()),
        samples=[rec.samples[c] for c in order if c in rec.samples],
        descriptions={c.name: c.description for c in schema.classes} if schema else {},
        scrub=scrub))
    write_atomic(task_dir / "instruction.md", text)
    return text
