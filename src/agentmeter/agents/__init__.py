"""agentmeter.agents"""
