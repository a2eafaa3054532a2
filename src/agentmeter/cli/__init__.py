"""The ``agentmeter`` command line: ``app`` is the program; one module per command group."""

from agentmeter.cli.app import app, main

__all__ = ["app", "main"]
