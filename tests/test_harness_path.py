"""The harness's own programs, run as root after the agent, are looked up on HARNESS_PATH: not
on an image PATH that starts in a directory the agent writes (a venv in its workdir). The test
command, collect hooks and the verifiers' steps are attacked in test_verifier_hardening.py, a
scenario step's setup in test_scenarios.py, the difftest engine in test_difftest_engine.py."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from taskgen import make_task

from agentmeter.agents.base import AgentContext
from agentmeter.agents.cli.agent import TEXT_MAX_BYTES, InstalledCliAgent
from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import AGENT_USER, HARNESS_PATH, SandboxSpec
from agentmeter.store.db import Store

#: the agent's own ``tail``, first on the image's PATH: it says so when root runs it
PLANT = ("mkdir -p /tmp/venv/bin && printf '#!/bin/sh\\n"
         "[ \"$(/usr/bin/id -u)\" = 0 ] && echo PLANTED-AS-ROOT\\nexec /usr/bin/tail \"$@\"\\n'"
         " > /tmp/venv/bin/tail && chmod 755 /tmp/venv/bin/tail")


async def test_a_cli_agents_long_stderr_is_read_by_the_harness_tail(
        local_backend: LocalBackend) -> None:
    sb = await local_backend.start(SandboxSpec(env={"PATH": f"/tmp/venv/bin:{HARNESS_PATH}"}))
    try:
        r = await sb.exec(["sh", "-c", f"{PLANT} && head -c {TEXT_MAX_BYTES + 1} /dev/zero "
                           "| tr '\\0' x > /tmp/stderr.log && echo END >> /tmp/stderr.log"],
                          user=AGENT_USER, cwd="/")
        assert r.exit_code == 0, r.stderr
        ctx = cast(AgentContext, type("Ctx", (), {"sandbox": sb})())
        text = await InstalledCliAgent._read_text(ctx, "/tmp/stderr.log")
        planted, ends = "PLANTED" in text, text.endswith("xEND\n")
        assert ends and not planted, text[:200]
    finally:
        await sb.stop()


async def test_the_harness_steps_load_no_library_of_the_agents(local_backend: LocalBackend) -> None:
    # the image's LD_LIBRARY_PATH names a directory the agent writes: a libc.so.6 of its own
    # there would be loaded by the harness's root sh (here a broken one, which stops it)
    sb = await local_backend.start(SandboxSpec(env={"LD_LIBRARY_PATH": "/tmp/lib"}))
    try:
        r = await sb.exec(["sh", "-c", "mkdir /tmp/lib && echo x > /tmp/lib/libc.so.6"],
                          user=AGENT_USER, cwd="/")
        assert r.exit_code == 0, r.stderr
        await sb.write_file("/tmp/written", "ok\n", user="root")  # root's sh, after the agent
        assert await sb.read_file("/tmp/written") == b"ok\n"
    finally:
        await sb.stop()


#: the agent's own sh first on HARNESS_PATH (``/usr/local/sbin``): as root (placing /tests) it
#: rewrites the staged test script to write a reward of 1
FORGE_SH = r"""mkdir -p /usr/local/sbin && cat > /usr/local/sbin/sh <<'X'
#!/bin/bash
if [ "$(/usr/bin/id -u)" = 0 ] && [ -d /.agentmeter-verifier/tests ]; then
    printf '#!/bin/bash\n/usr/bin/mkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\n' \
        > /.agentmeter-verifier/tests/test.sh
fi
exec /bin/sh "$@"
X
chmod 755 /usr/local/sbin/sh"""


async def test_a_workdir_holding_the_harness_path_is_not_given_to_the_agent(
        tmp_path: Path) -> None:
    # the runner gives the agent its workdir (chown -R): /usr/local would give it the first
    # directories of HARNESS_PATH, whose programs every root step of the harness runs
    make_task(tmp_path / "suite", "wd", solve=FORGE_SH,
              dockerfile="FROM debian:trixie\nWORKDIR /usr/local\n")
    store = Store.open(tmp_path / "store")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(tmp_path / "suite")],
                                                 agents=["oracle"])), None)
    (t,) = store.latest_completed_trials(rid)
    assert t.status is not TrialStatus.PASSED and not t.reward, (t.status, t.reward, t.error)
    assert "holds the system's programs (/usr/local/sbin)" in (t.error or ""), t.error
