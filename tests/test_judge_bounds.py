"""Judge calls are bounded: every one carries an output cap (a tiny local model at temperature 0
that never closes its JSON would otherwise generate to its context limit on every call: ``judge
check`` with ``local/smollm2-135m`` ran for over ten minutes), and the harness's judge client
gives up on a call after its timeout (a VerificationError, the gateway then cancels a local
model's generation)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agentmeter.gateway import Gateway, ModelRegistry, UpstreamModel
from agentmeter.gateway.scripted import judge as scripted_judge
from agentmeter.pricing import PriceBook
from agentmeter.runner import feedback
from agentmeter.runner.judging import DEFAULT_MAX_TOKENS, GatewayJudge, request_body
from agentmeter.verify import judgecheck
from agentmeter.verify.judge import JudgeMessage, JudgeReply, rubric_max_tokens
from agentmeter.verify.protocol import Verdict, VerificationError


class _Capped:
    """A judge client recording each call's ``max_tokens``, answering as the scripted judge."""

    model = "scripted/judge"

    def __init__(self) -> None:
        self.caps: list[int | None] = []

    async def complete(self, messages: Sequence[JudgeMessage], *, temperature: float = 0.0,
                       max_tokens: int | None = None,
                       schema: dict[str, Any] | None = None) -> JudgeReply:
        self.caps.append(max_tokens)
        text = messages[-1].content[0]
        assert isinstance(text, str)
        return JudgeReply(text=scripted_judge.decide("normalized", text).text, model=self.model)


async def test_every_judge_call_of_the_verifiers_has_an_output_cap(tmp_path: Path) -> None:
    from taskgen import make_task

    from agentmeter.tasks.native import load_native_task

    judge = _Capped()
    report = await judgecheck.check(judge)  # the SM and rubric judges' own calls
    assert len(judge.caps) == len(judgecheck.load()) and report.accuracy == 1
    assert all(c is not None and 0 < c <= rubric_max_tokens(2) for c in judge.caps), judge.caps
    task = load_native_task(make_task(tmp_path, "t"))
    await feedback.user_sim(Verdict(reward=0.2, pass_threshold=0.6), task, judge)
    assert judge.caps[-1] is not None and judge.caps[-1] <= 1024
    # and the client sends a cap when a caller gives none, in both APIs it speaks
    msgs = [JudgeMessage(role="user", content=("hi",))]
    for api in ("chat", "messages"):
        assert request_body(api, "m", msgs, 0.0, None)["max_tokens"] == DEFAULT_MAX_TOKENS
        assert request_body(api, "m", msgs, 0.0, 300)["max_tokens"] == 300


async def test_a_judge_call_without_a_reply_in_time_is_a_verification_error() -> None:
    """A judge upstream that never answers: the call ends after the client's timeout; the
    gateway sees its client gone and cancels the local upstream's request."""
    cancelled = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", hang)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    models = ModelRegistry()
    models.add(UpstreamModel(name="hang/judge", base_url=f"http://127.0.0.1:{port}/v1",
                             wire_api="chat", local=True))
    gw = Gateway(models, PriceBook(use_genai_prices=False), allow_unpriced=True)
    await gw.start(private_socket=True)
    try:
        judge = GatewayJudge(gw, "hang/judge", "t1", lambda c: None, timeout_s=0.5)
        t0 = time.monotonic()
        with pytest.raises(VerificationError, match="no reply within 0.5 s"):
            await judge.complete([JudgeMessage(role="user", content=("hi",))])
        assert time.monotonic() - t0 < 5
        await asyncio.wait_for(cancelled.wait(), 5)  # the upstream's request was cancelled
        await judge.close(settle=False)
    finally:
        await gw.stop()
        await runner.cleanup()


class _Schemas:
    """A judge client recording each call's reply schema, answering ``reply``."""

    model = "local/x"

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.schemas: list[dict[str, Any] | None] = []

    async def complete(self, messages: Sequence[JudgeMessage], *, temperature: float = 0.0,
                       max_tokens: int | None = None,
                       schema: dict[str, Any] | None = None) -> JudgeReply:
        self.schemas.append(schema)
        return JudgeReply(text=self.reply, model=self.model)


async def test_user_simulation_and_synthesis_calls_carry_their_reply_schema(
        tmp_path: Path) -> None:
    """As the SM and rubric judges (text and vision share rubric ``ask``) do: the user
    simulation's and the synthesis model's calls give their reply's JSON schema (sent to a
    model with constrained output, runner/judging.py), one that llama.cpp turns into a grammar
    (its own converter, when installed). A constrained user-simulation reply reads as its
    paragraphs; prose from an unconstrained model as it is."""
    import json

    from taskgen import make_task

    from agentmeter.synth import assist
    from agentmeter.tasks.native import load_native_task
    from agentmeter.verify.difftest import judging as sm
    from agentmeter.verify.rubric.config import RubricItem
    from agentmeter.verify.rubric.judging import reply_schema

    task = load_native_task(make_task(tmp_path, "t"))
    parts = {"status": "Rejected, 2/10.", "diagnosis": "The report is missing.",
             "root_cause": "Nothing was written.", "directives": "Write report.txt."}
    judge = _Schemas(json.dumps(parts))
    report = await feedback.user_sim(Verdict(reward=0.2, pass_threshold=0.6), task, judge)
    assert judge.schemas == [feedback.USER_SIM_SCHEMA]
    assert report.split("\n\n")[1:] == list(parts.values())
    assert feedback.report_text("Rejected: write the report.") == "Rejected: write the report."

    valid = {"version": 1, "command": "tree", "classes": [{
        "name": "tree <dir>", "command": "tree {dir}",
        "params": [{"name": "dir", "type": "path", "values": ["d"]}]}]}
    synth = _Schemas(json.dumps(valid))
    use = assist.ModelUse(model=synth.model)
    got = await assist.ask(synth, assist.first_prompt("tree", "", {"tree": "usage"}), use, 0)
    assert got.command == "tree" and synth.schemas == [assist.REPLY_SCHEMA]

    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    items = [RubricItem(id="a", description="a", check="text_judge")]
    for schema in (sm.SCHEMA, reply_schema(items), feedback.USER_SIM_SCHEMA,
                   assist.REPLY_SCHEMA):
        grammar.LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
