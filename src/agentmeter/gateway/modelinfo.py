"""What the gateway says of the one model a trial may use, in the client API's own form: the
model listings (``GET /v1/models``, ``/v1beta/models``) and Gemini's model entry."""

from __future__ import annotations

from typing import Any

from agentmeter.records import WireApi

#: the Gemini methods the gateway serves (``models/{model}:{method}``)
GEMINI_METHODS = ("generateContent", "streamGenerateContent", "countTokens")


def gemini_entry(name: str) -> dict[str, Any]:
    return {"name": f"models/{name}", "baseModelId": name, "version": "agentmeter",
            "displayName": name, "inputTokenLimit": 1048576, "outputTokenLimit": 65536,
            "supportedGenerationMethods": list(GEMINI_METHODS)}


def model_list(api: WireApi, name: str) -> dict[str, Any]:
    """The listing of ``name``: Gemini's, else OpenAI's and Anthropic's fields in one entry."""
    if api == "gemini":
        return {"models": [gemini_entry(name)]}
    entry = {"id": name, "object": "model", "type": "model", "created": 0,
             "created_at": "1970-01-01T00:00:00Z", "owned_by": "agentmeter",
             "display_name": name}
    return {"object": "list", "data": [entry], "has_more": False,
            "first_id": name, "last_id": name}
