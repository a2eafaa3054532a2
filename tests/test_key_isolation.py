"""Provider keys never enter a sandbox: a full trial against a keyed upstream, where the agent's
own commands look for the key in the environment, /proc, the process list and the files."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from aiohttp import web
from taskgen import make_task

from agentmeter.gateway.scripted.policy import Policy
from agentmeter.gateway.scripted.server import Exchange, make_app
from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.store.db import Store

EVIDENCE = r"""
{ echo '== env'; env
  echo '== proc environ'; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'
  echo '== processes'; ps -eo args 2>/dev/null || cat /proc/[0-9]*/cmdline | tr '\0' ' '
  echo '== files'; grep -rsl 'sk-agentmeter-test-' /app /home /tmp /root /etc /run /var /opt /logs 2>/dev/null
  echo '== unauthenticated call'; exec 3<>/dev/tcp/127.0.0.1/18080 &&
    printf 'GET /v1/models HTTP/1.0\r\n\r\n' >&3 && head -1 <&3
} > /app/evidence.txt 2>&1
echo done > /app/done
"""


async def test_provider_key_never_reaches_the_sandbox(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-agentmeter-test-" + secrets.token_hex(16)
    monkeypatch.setenv("AGENTMETER_TEST_PROVIDER_KEY", secret)
    suite = tmp_path / "suite"
    make_task(suite, "dump-environment", solve=EVIDENCE,
              test="#!/bin/bash\nmkdir -p /logs/verifier\ncat /app/evidence.txt\n"
                   "[ -f /app/done ] && echo 1 > /logs/verifier/reward.txt "
                   "|| echo 0 > /logs/verifier/reward.txt\n")
    log: list[Exchange] = []
    runner = web.AppRunner(make_app(Policy("solver"), solution_script=EVIDENCE, log=log))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    models = tmp_path / "models.toml"
    models.write_text(f'[models."keyed/solver"]\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                      f'wire_api = "chat"\nkey_env = "AGENTMETER_TEST_PROVIDER_KEY"\n'
                      f'price_key = "scripted/solver"\n')
    try:
        store = Store.open(tmp_path / "runs")
        rid, _ = await run(store, prepare(RunRequest(
            suites=[str(suite)], agents=["native"], models=["keyed/solver"],
            models_file=str(models))))
    finally:
        await runner.cleanup()
    (trial,) = store.latest_completed_trials(rid)
    assert trial.status is TrialStatus.PASSED, trial.error
    # the upstream received the real key; the agent's commands ran and looked everywhere
    assert log and all(ex.headers.get("Authorization") == f"Bearer {secret}" for ex in log)
    verifier_log = next(a for a in store.artifacts(rid, trial.id) if a.name == "verifier.log")
    evidence = (store.run_dir(rid) / verifier_log.relpath).read_text()
    for section in ("== env", "== proc environ", "== processes", "== files", "== unauthenticated call"):
        assert section in evidence
    assert "HOME=/home/agent" in evidence
    assert " 401 " in evidence.rsplit("== unauthenticated call", 1)[1]  # reachable, but not without a token
    assert secret not in evidence
    files = evidence.rsplit("== files", 1)[1].split("== unauthenticated call")[0].split()
    assert set(files) <= {"/app/evidence.txt"}  # only because the process list quotes the pattern
    assert "AGENTMETER_TEST_PROVIDER_KEY" not in evidence
