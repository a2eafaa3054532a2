"""``python -m agentmeter``."""

from agentmeter.cli import app

app()
