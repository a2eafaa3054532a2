"""``python -m agentmeter.cli``."""

from agentmeter.cli.app import app

app()
