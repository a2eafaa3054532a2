"""agentmeter.pricing"""
