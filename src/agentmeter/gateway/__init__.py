"""agentmeter.gateway: the metering proxy every model call goes through.

Serves OpenAI Chat Completions, OpenAI Responses and Anthropic Messages (streaming and not),
meters every call, enforces per-trial budgets, injects provider keys, translates for chat-only
upstreams, and hosts the scripted offline model (``scripted/<policy>``).
"""

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

__all__ = ["BUILTIN_PROVIDERS", "Budget", "Gateway", "GatewayError", "GatewayLimits", "ModelConfigError",
           "ModelRegistry", "RetryPolicy", "ScriptedContext", "TrialMeter", "UpstreamModel"]
