"""agentmeter.tasks"""
