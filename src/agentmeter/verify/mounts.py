"""Where verification puts things inside the sandbox; a module of its own so that loading a task
(which names these paths) does not import the verifiers' machinery (asyncio, the sandbox API)."""

#: where the task's verifier files are placed inside the sandbox (at verification time)
TESTS_MOUNT = "/tests"

#: Terminal-Bench's parser names that are verifier kinds of their own
#: (``agentmeter.verify.tb_parsers.TB_PARSERS`` implements them; tests/test_cli_start.py checks)
TB_PARSER_NAMES = ("swebench", "sweperf", "mlebench", "swelancer")
