"""agentmeter.report"""
