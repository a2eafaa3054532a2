"""agentmeter.metrics"""
