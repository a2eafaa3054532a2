"""Structured judge output: a judge model that declares constrained decoding (the ``local/``
models, ``llamacpp/``, or ``structured_output`` in a models file) is sent the verdict's JSON
schema as ``response_format``, so a tiny model can only emit a verdict-shaped object; a model
that does not declare it is never sent one. Whatever comes back is parsed strictly: a malformed
or cut-off reply is an unusable verdict, never a pass."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from agentmeter.gateway import Gateway, ModelRegistry, UpstreamModel, localmodels
from agentmeter.pricing import PriceBook
from agentmeter.records import CaseOutcome
from agentmeter.runner.judging import GatewayJudge, request_body
from agentmeter.verify import judgecheck
from agentmeter.verify.difftest import judging as sm_judging
from agentmeter.verify.difftest.config import DifftestConfig
from agentmeter.verify.judge import JudgeMessage
from agentmeter.verify.protocol import VerificationError
from agentmeter.verify.rubric import judging
from agentmeter.verify.rubric.config import RubricItem

MSGS = [JudgeMessage(role="user", content=("hi",))]
ITEMS = [RubricItem.model_validate({"check": "text_judge", "id": i, "description": i})
         for i in ("names", "team")]


def test_which_providers_declare_structured_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(localmodels, "find", lambda name: None)  # as if installed
    reg = ModelRegistry()
    assert reg.resolve("local/smollm2-135m").structured_output == "llamacpp"
    assert reg.resolve("llamacpp/any").structured_output == "llamacpp"
    for name in ("openai/gpt-5", "anthropic/claude", "ollama/x", "scripted/judge"):
        assert reg.resolve(name).structured_output is None, name
    # a models file names it per model
    declared = UpstreamModel.model_validate({"name": "vllm/q", "base_url": "http://h/v1",
                                             "structured_output": "openai"})
    assert declared.structured_output == "openai"
    own = UpstreamModel.model_validate({"name": "my-judge", "base_url": "local"})
    assert own.local and own.structured_output == "llamacpp"  # agentmeter's own server


def test_the_request_carries_the_schema_only_when_declared() -> None:
    schema = sm_judging.SCHEMA
    body = request_body("chat", "m", MSGS, 0.0, 300, schema, "llamacpp")
    assert body["response_format"] == {"type": "json_object", "schema": schema}
    assert body["temperature"] == 0.0 and body["max_tokens"] == 300
    body = request_body("chat", "m", MSGS, 0.0, 300, schema, "openai")
    assert body["response_format"]["json_schema"]["schema"] == schema
    assert "response_format" not in request_body("chat", "m", MSGS, 0.0, 300, schema, None)
    assert "response_format" not in request_body("chat", "m", MSGS, 0.0, 300, None, "llamacpp")
    assert "response_format" not in request_body("messages", "m", MSGS, 0.0, 300, schema,
                                                 "llamacpp")


def test_the_rubric_schema_fixes_every_item_and_agrees_with_the_parser() -> None:
    schema = judging.reply_schema(ITEMS)
    entries = schema["properties"]["items"]["prefixItems"]
    assert [e["properties"]["id"]["const"] for e in entries] == ["names", "team"]
    assert schema["properties"]["items"]["items"] is False
    assert schema["properties"]["score"]["enum"] == list(range(11))
    # free text: bounded, and no quote, backslash or control character (llama.cpp's grammar
    # for a JSON string lets a raw newline through, which no JSON parser takes)
    import re
    for text in (entries[0]["properties"]["reason"], schema["properties"]["reason"],
                 sm_judging.SCHEMA["properties"]["reason"]):
        pattern = re.compile(text["pattern"])
        assert pattern.match("x" * text["maxLength"]) and not pattern.match(
            "x" * (text["maxLength"] + 1))
        assert not any(pattern.match(f"a{c}b") for c in ('"', "\\", "\n", "\x00"))
    # an object of exactly the schema's shape is a usable verdict
    reply = {"items": [{"id": "names", "satisfied": True, "reason": "r"},
                       {"id": "team", "satisfied": False, "reason": "r"}],
             "score": 5, "confidence": 0.5, "reason": "r"}
    result = judging.parse_reply("text", json.dumps(reply), ITEMS, "items")
    assert result is not None and result.items["names"][0] and not result.items["team"][0]
    assert sm_judging.parse_reply(json.dumps({"equivalent": False, "reason": "r"})) == (False, "r")


class _Upstream:
    """A chat upstream that records each request body and answers with ``replies`` in turn."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.bodies: list[dict[str, Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json())
        text = self.replies[min(len(self.bodies), len(self.replies)) - 1]
        return web.json_response({
            "id": "x", "object": "chat.completion", "model": "tiny",
            "choices": [{"index": 0, "finish_reason": "length",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})


@pytest.fixture
async def served() -> AsyncIterator[tuple[Gateway, _Upstream]]:
    up = _Upstream([])
    app = web.Application()
    app.router.add_post("/v1/chat/completions", up.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    models = ModelRegistry()
    models.add(UpstreamModel(name="llamacpp/tiny", base_url=base, local=True,
                             structured_output="llamacpp"))
    models.add(UpstreamModel(name="plain/tiny", base_url=base, local=True))
    gw = Gateway(models, PriceBook(use_genai_prices=False), allow_unpriced=True)
    await gw.start(private_socket=True)
    try:
        yield gw, up
    finally:
        await gw.stop()
        await runner.cleanup()


def _sm_prompt(candidate: str = "Result: 6\n") -> list[JudgeMessage]:
    o = CaseOutcome(id="c", cls="check", key="c", status="valid", command="calc add 2 3",
                    oracle_stdout="Result: 5\n", candidate_stdout=candidate)
    return sm_judging.prompt(o, DifftestConfig(cli_name="tool", language="python"))


async def test_the_judge_client_sends_the_schema_to_a_declaring_model_only(
        served: tuple[Gateway, _Upstream]) -> None:
    gw, up = served
    up.replies = ['{"equivalent": false, "reason": "6 is not 5"}']
    for model, sent in (("llamacpp/tiny", True), ("plain/tiny", False)):
        up.bodies.clear()
        judge = GatewayJudge(gw, model, f"t-{model}", lambda c: None)
        assert await sm_judging._ask(judge, _sm_prompt()) == (False, "6 is not 5")
        await judge.close()
        fmt = up.bodies[0].get("response_format")
        if sent:
            assert fmt == {"type": "json_object", "schema": sm_judging.SCHEMA}, model
        else:
            assert fmt is None, model
    # the rubric judge's call carries its items' schema
    up.bodies.clear()
    judge = GatewayJudge(gw, "llamacpp/tiny", "t-rubric", lambda c: None)
    case = next(c for c in judgecheck.load() if c["id"] == "rubric-answer")
    up.replies = [json.dumps({"items": [{"id": "names", "satisfied": True, "reason": "yes"},
                                        {"id": "team", "satisfied": False, "reason": "no"}],
                              "score": 5, "confidence": 0.9, "reason": "half"})]
    report = await judgecheck.check(judge, [case])
    await judge.close()
    assert [v.judged for v in report.verdicts] == [True, False]
    fmt = up.bodies[0]["response_format"]
    assert fmt["schema"] == judging.reply_schema(
        [RubricItem.model_validate({"check": "text_judge", **i}) for i in case["items"]])
    assert up.bodies[0]["max_tokens"] == judging.rubric_max_tokens(2)


#: replies a constrained model can still give: cut off by max_tokens mid-object (the schema
#: bounds the reasons, but a cap reached first leaves an open string), rambling text, an
#: object of the wrong shape, an item missing
UNUSABLE_SM = ['{"equivalent": true, "reason": "the outputs are the same because the same',
               "The outputs are equivalent. " * 40, '{"equal": true}',
               '{"equivalent": "maybe", "reason": ""}', '']
UNUSABLE_RUBRIC = [
    '{"items": [{"id": "names", "satisfied": true, "reason": "it names',
    '{"items": [{"id": "names", "satisfied": true, "reason": "ok"}], "score": 10, "confide',
    '{"items": [{"id": "names", "satisfied": true, "reason": "ok"}], "score": 10}',
    "score 10 " * 60,
    # Gemma 3 270M under llama.cpp's grammar for a plain JSON string: a raw newline in a
    # reason (the schema's reason pattern now excludes control characters)
    '{"items": [{"id": "names", "satisfied": true, "reason": "<one sentence> ><one\n" },'
    ' {"id": "team", "satisfied": true, "reason": "x"}], "score": 0, "confidence": 1.0,'
    ' "reason": "r"}']


async def test_malformed_or_cut_off_structured_replies_are_unusable_never_a_pass(
        served: tuple[Gateway, _Upstream]) -> None:
    gw, up = served
    for text in UNUSABLE_SM:
        up.replies, up.bodies = [text], []
        judge = GatewayJudge(gw, "llamacpp/tiny", "t-sm", lambda c: None)
        equivalent, reason = await sm_judging._ask(judge, _sm_prompt())
        await judge.close()
        assert equivalent is None and "unparsable" in reason, text
        assert len(up.bodies) == 2  # asked again once, then unusable
    case = next(c for c in judgecheck.load() if c["id"] == "rubric-answer")
    for text in UNUSABLE_RUBRIC:
        up.replies = [text]
        judge = GatewayJudge(gw, "llamacpp/tiny", "t-rb", lambda c: None)
        report = await judgecheck.check(judge, [case])
        await judge.close()
        assert [v.judged for v in report.verdicts] == [None, None], text
        assert report.accuracy == 0
        judge = GatewayJudge(gw, "llamacpp/tiny", "t-rb2", lambda c: None)
        with pytest.raises(VerificationError, match="without a usable verdict"):
            await judging.ask(judge, "text", MSGS, ITEMS, "items", [])
        await judge.close()
