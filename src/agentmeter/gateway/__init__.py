"""agentmeter.gateway: the metering proxy every model call goes through.

Serves OpenAI Chat Completions, OpenAI Responses and Anthropic Messages (streaming and not),
meters every call, enforces per-trial budgets, injects provider keys, translates for chat-only
upstreams, and hosts the scripted offline model (``scripted/<policy>``).
"""

from typing import TYPE_CHECKING

from agentmeter.lazy import lazy_exports

# The names below are imported on first use (PEP 562), not with the package: a submodule
# (``agentmeter.gateway.<module>``) imports without the others, and the command
# line starts without numpy, SQLAlchemy or aiohttp (tests/test_cli_start.py).
if TYPE_CHECKING:
    from agentmeter.gateway.bounds import GatewayLimits
    from agentmeter.gateway.metering import Budget, ScriptedContext, TrialMeter
    from agentmeter.gateway.registry import (
        BUILTIN_PROVIDERS,
        ModelConfigError,
        ModelRegistry,
        UpstreamModel,
    )
    from agentmeter.gateway.server import Gateway, GatewayError
    from agentmeter.gateway.upstream import RetryPolicy

#: name -> the module that defines it
_LAZY: dict[str, str] = {name: module for module, names in {
    "agentmeter.gateway.bounds": ("GatewayLimits",),
    "agentmeter.gateway.metering": ("Budget", "ScriptedContext", "TrialMeter"),
    "agentmeter.gateway.registry": (
        "BUILTIN_PROVIDERS", "ModelConfigError", "ModelRegistry", "UpstreamModel",
    ),
    "agentmeter.gateway.server": ("Gateway", "GatewayError"),
    "agentmeter.gateway.upstream": ("RetryPolicy",),
}.items() for name in names}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = ["BUILTIN_PROVIDERS", "Budget", "Gateway", "GatewayError", "GatewayLimits", "ModelConfigError",
           "ModelRegistry", "RetryPolicy", "ScriptedContext", "TrialMeter", "UpstreamModel"]
