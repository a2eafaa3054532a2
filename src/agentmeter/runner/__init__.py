"""agentmeter.runner"""
