"""agentmeter.gateway"""
