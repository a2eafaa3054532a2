"""The scripted offline model (``scripted/<policy>``): a test double at the model boundary only."""

from agentmeter.gateway.scripted.model import SCRIPTED_PREFIX, ScriptedModel, ScriptedReply
from agentmeter.gateway.scripted.policy import Policy, PolicyError, heredoc_command

__all__ = ["SCRIPTED_PREFIX", "Policy", "PolicyError", "ScriptedModel", "ScriptedReply",
           "heredoc_command"]
