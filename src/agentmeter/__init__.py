"""agentmeter: evaluate deployed agent configurations on local tasks, measuring success and cost together."""

__version__ = "0.1.0"
