"""The native agent (``native``): agentmeter's own minimal tool-calling scaffold.

Register with ``register("native", factory)``; options are :class:`NativeOptions` fields.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from agentmeter.agents.native.agent import NativeAgent
from agentmeter.agents.native.options import NativeOptions


def factory(version: str | None, options: dict[str, Any]) -> NativeAgent:
    """The registry's factory: a clear ``ValueError`` for bad options."""
    try:
        parsed = NativeOptions.model_validate(options)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
                             for err in e.errors())
        raise ValueError(f"native agent options: {problems}") from None
    return NativeAgent(parsed, version)


__all__ = ["NativeAgent", "NativeOptions", "factory"]
