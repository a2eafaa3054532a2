"""agentmeter.sandbox"""
