"""The verifier's own defences, each attacked: a full disk cannot make a failure infra_invalid, a
verifier killed by a signal is a fail with a stated problem, agent code run through $AS_AGENT
cannot reach the reward or the tests, and a pytest run cut short is no pass."""

from __future__ import annotations

from pathlib import Path

from taskgen import TOML, make_task

from agentmeter.records import TrialRecord, TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.store.db import Store
from agentmeter.verify.pytest_output import score_pytest_output


async def _trials(tmp_path: Path, suite: Path) -> dict[str, TrialRecord]:
    store = Store.open(tmp_path / "store")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(suite)], agents=["oracle"],
                                                 concurrency=2)), None)
    return {t.task_id: t for t in store.latest_completed_trials(rid)}


async def test_full_disk_fails_the_task_not_the_trial(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    task = make_task(suite, "fill-disk", solve="dd if=/dev/zero of=/app/fill bs=1M || true\n"
                     "df -h /app; echo still here")
    # a small disk quota the agent fills before verification
    (task / "task.toml").write_text(TOML.format(tier="easy", agent_timeout=60.0)
                                    + "storage_mb = 32\n")
    trial = (await _trials(tmp_path, suite))["fill-disk"]
    assert trial.status is TrialStatus.FAILED, (trial.status, trial.error)


async def test_verifier_killed_by_a_signal_is_a_fail_with_a_problem(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    make_task(suite, "killed", test="#!/bin/bash\nmkdir -p /logs/verifier\n"
              "echo 1 > /logs/verifier/reward.txt\nkill -9 $$\n")
    trial = (await _trials(tmp_path, suite))["killed"]
    assert trial.status is TrialStatus.FAILED and trial.reward is None
    assert trial.error is not None and "killed by signal 9" in trial.error


PROBE = r"""
# as the agent (through $AS_AGENT): what can agent code reach while the verifier runs?
id -u > /tmp/probe-uid
(echo 1 > /logs/verifier/reward.txt) 2>/dev/null && echo wrote-reward >> /tmp/probe
(ls /tests) >/dev/null 2>&1 && echo read-tests >> /tmp/probe
(kill -9 "$TEST_PID") 2>/dev/null && echo killed-test >> /tmp/probe
sleep 300 &
exit 0
"""
AS_AGENT_TEST = f"""#!/bin/bash
mkdir -p /logs/verifier
cat > /tmp/probe.sh <<'EOF'
{PROBE}
EOF
chmod 755 /tmp/probe.sh
rm -f /tmp/probe
TEST_PID=$$ "$AS_AGENT" /tmp/probe.sh
echo "rc=$? uid=$(cat /tmp/probe-uid) probe=$(cat /tmp/probe 2>/dev/null)"
left=$(for p in /proc/[0-9]*; do [ "$(stat -c %u "$p" 2>/dev/null)" = 1000 ] && echo "$p"; done)
if [ "$(cat /tmp/probe-uid)" = 1000 ] && [ ! -s /tmp/probe ] && [ -z "$left" ] \
   && [ ! -e /logs/verifier/reward.txt ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
"""


#: planted by the agent as programs on the image's PATH: run as root, it forges a pass
FORGER = """#!/bin/sh
if [ "$(/usr/bin/id -u)" = 0 ]; then  # the tests in place, or still staged
  for t in /tests/test.sh /.agentmeter-verifier/tests/test.sh; do
    [ -f "$t" ] && printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\n' > "$t"
  done
fi
[ "$(/usr/bin/id -u)" = 0 ] && [ -d /logs/verifier ] && echo 1 > /logs/verifier/reward.txt
exec /usr/bin/$(/usr/bin/basename "$0") "$@"
"""
PLANTED = ("bash", "sh", "id", "mkdir", "rm", "mv", "chown", "setpriv", "env", "unshare")


async def test_as_agent_cannot_reach_reward_tests_or_test_script(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    make_task(suite, "as-agent", test=AS_AGENT_TEST)
    # security review 4: an image whose PATH starts in the agent's workdir (a venv, as uv
    # images have it): the agent plants programs there; the harness's own steps as root
    # (placing /tests, the test's bash, $AS_AGENT) ran them: a careful test was forged
    plant = "mkdir -p /app/.venv/bin\ncat > /app/.venv/bin/forger <<'EOF'\n" + FORGER + "EOF\n" \
        + "chmod 755 /app/.venv/bin/forger\n" \
        + "".join(f"ln -s forger /app/.venv/bin/{n}\n" for n in PLANTED)
    make_task(suite, "venv-path", solve=plant, dockerfile=(
        "FROM debian:trixie\nWORKDIR /app\n"
        "ENV PATH=/app/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"),
        test="#!/bin/bash\n/bin/mkdir -p /logs/verifier\n"  # nothing looked up on PATH
             "if [ -f /app/done ]; then echo 1 > /logs/verifier/reward.txt; "
             "else echo 0 > /logs/verifier/reward.txt; fi\n\"$AS_AGENT\" /bin/true\n")
    with open(suite / "venv-path" / "task.toml", "a") as f:  # a collect hook, as root
        f.write('[[verifier.collect]]\ncommand = "/bin/true"\n')
    trials = await _trials(tmp_path, suite)
    assert trials["as-agent"].status is TrialStatus.PASSED, trials["as-agent"].error
    venv = trials["venv-path"]
    assert (venv.status, venv.reward) == (TrialStatus.FAILED, 0.0), venv.error


def test_pytest_cut_short_is_no_pass() -> None:
    header = "=========================== short test summary info ============================\n"
    # agent code printed what looks like results, then os._exit(0): no summary, no closing line
    assert score_pytest_output("PASSED tests/test_outputs.py::test_a\n").reward is None
    assert score_pytest_output(header + "PASSED tests/test_outputs.py::test_a\n").reward is None
    done = score_pytest_output(header + "PASSED tests/test_outputs.py::test_a\n"
                               "============================== 1 passed in 0.01s ===============\n")
    assert done.reward == 1.0
    # the closing counts disagree with the lines: never a pass
    lying = score_pytest_output(header + "PASSED tests/test_outputs.py::test_a\n"
                                "===================== 1 failed, 1 passed in 0.01s =====\n")
    assert lying.reward == 0.0
