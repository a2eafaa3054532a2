"""agentmeter.verify: what the harness adds to a sandbox to verify a trial."""
