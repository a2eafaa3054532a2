"""agentmeter.store"""
