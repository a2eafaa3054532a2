"""Error bodies in each wire API's own shape."""

from __future__ import annotations

import json
from typing import Any

from agentmeter.records import WireApi

_ANTHROPIC_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
    429: "rate_limit_error", 529: "overloaded_error",
}
_OPENAI_TYPES = {
    400: "invalid_request_error", 401: "invalid_request_error", 403: "permission_error",
    404: "invalid_request_error", 429: "rate_limit_error",
}

#: Google's canonical status names (google.rpc.Code) by HTTP status
GEMINI_STATUS = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    409: "ABORTED", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED",
    500: "INTERNAL", 501: "UNIMPLEMENTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def error_body(api: WireApi, status: int, message: str, *, code: str | None = None,
               kind: str | None = None) -> dict[str, Any]:
    if api == "gemini":
        return {"error": {"code": status, "message": message,
                          "status": kind or GEMINI_STATUS.get(status, "UNKNOWN")}}
    if api == "messages":
        return {"type": "error",
                "error": {"type": kind or _ANTHROPIC_TYPES.get(status, "api_error"),
                          "message": message}}
    return {"error": {"message": message, "type": kind or _OPENAI_TYPES.get(status, "server_error"),
                      "param": None, "code": code}}


def error_bytes(api: WireApi, status: int, message: str, *, code: str | None = None,
                kind: str | None = None) -> bytes:
    return json.dumps(error_body(api, status, message, code=code, kind=kind)).encode()


def gemini_budget_bytes(message: str) -> bytes:
    """A budget refusal in Gemini's shape: quota exhausted, for good (a ``PerDay`` quota id, which
    Google's clients treat as not worth retrying within the session)."""
    body = error_body("gemini", 429, message)
    body["error"]["details"] = [{
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [{"subject": "agentmeter trial", "description": message,
                        "quotaId": "AgentmeterTrialBudgetPerDay"}]}]
    return json.dumps(body).encode()


def error_message(body: bytes) -> str:
    """The message of an error body of any API shape (or its text)."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return body[:500].decode("utf-8", "replace")
    if isinstance(value, dict):
        err = value.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if isinstance(value.get("message"), str):
            return str(value["message"])
    return body[:500].decode("utf-8", "replace")


def convert_error(body: bytes, status: int, to_api: WireApi) -> bytes:
    """An upstream error body re-shaped for a client of another API."""
    return error_bytes(to_api, status, error_message(body))
