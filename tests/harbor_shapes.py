"""Task directories of each shape Harbor's and Terminal-Bench's own examples take (written for
agentmeter's tests, not copied from either repository): ``write_shapes(root)`` writes them and
returns what each should do offline (a run with ``--network-default none``: they state no
network, so Harbor's default, public, is theirs otherwise): ``"pass"`` (the oracle passes, nop
fails), ``"skip"`` (it asks for what agentmeter cannot honour: skipped with its reason) or
``"network"`` (it needs the internet it did not ask for: the oracle fails and says the network
was missing)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

Expect = Literal["pass", "skip", "network"]

REWARD = ('if {cond}; then echo 1 > /logs/verifier/reward.txt; '
          'else echo 0 > /logs/verifier/reward.txt; fi\n')


def _harbor(root: Path, name: str, *, toml: str = "", dockerfile: str | None = None,
            solve: str, cond: str, files: dict[str, str] | None = None,
            test: str | None = None) -> Path:
    d = root / name
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "solution").mkdir()
    (d / "task.toml").write_text('schema_version = "1.4"\n' + toml)
    (d / "instruction.md").write_text(f"Shape {name}: do what solution/solve.sh does.\n")
    (d / "environment" / "Dockerfile").write_text(
        dockerfile if dockerfile is not None else "FROM ubuntu:24.04\nWORKDIR /app\n")
    (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\nset -e\n{solve}\n")
    (d / "tests" / "test.sh").write_text(test or f"#!/bin/bash\n{REWARD.format(cond=cond)}")
    for rel, text in (files or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


def write_shapes(root: Path) -> dict[str, Expect]:
    root.mkdir(parents=True, exist_ok=True)
    expect: dict[str, Expect] = {}

    _harbor(root, "hello-world", solve='echo "Hello, world!" > /app/hello.txt',
            cond='[ "$(cat /app/hello.txt)" = "Hello, world!" ]')
    expect["hello-world"] = "pass"
    _harbor(root, "hello-workdir", toml='[environment]\nworkdir = "/custom"\n',
            dockerfile="FROM ubuntu:24.04\nRUN mkdir -p /custom\n",
            solve="pwd > workdir.txt", cond='[ "$(cat /custom/workdir.txt)" = /custom ]')
    expect["hello-workdir"] = "pass"
    _harbor(root, "hello-user", toml='[agent]\nuser = "agent"\n',
            dockerfile="FROM ubuntu:24.04\nRUN useradd -m agent\nWORKDIR /app\n"
                       "RUN chown agent /app\n",
            solve="whoami > /app/whoami.txt", cond='[ "$(cat /app/whoami.txt)" = agent ]')
    expect["hello-user"] = "pass"
    _harbor(root, "multi-stage",
            dockerfile="FROM --platform=linux/amd64 debian:bookworm AS build\n"
                       "RUN mkdir /out && printf '#!/bin/sh\\necho built-tool\\n' > /out/tool "
                       "&& chmod 755 /out/tool\n"
                       "FROM --platform=$BUILDPLATFORM debian:bookworm-slim\n"
                       "LABEL org.example.shape=multi-stage\nEXPOSE 8080\n"
                       "COPY --from=build /out/tool /usr/local/bin/tool\n"
                       'SHELL ["/bin/bash", "-o", "pipefail", "-c"]\nWORKDIR /app\n'
                       'HEALTHCHECK CMD true\nENTRYPOINT ["/bin/bash"]\nCMD ["-l"]\n',
            solve="tool > /app/out.txt", cond='[ "$(cat /app/out.txt)" = built-tool ]')
    expect["multi-stage"] = "pass"
    _harbor(root, "artifacts",
            toml='artifacts = ["/app/report.txt"]\n\n[[verifier.collect]]\n'
                 'command = "ls /app > /logs/artifacts/listing.txt"\n',
            solve="echo report > /app/report.txt; echo log > /logs/artifacts/agent.log",
            cond="grep -q report.txt /logs/artifacts/listing.txt && [ -f /logs/artifacts/agent.log ]")
    expect["artifacts"] = "pass"
    _harbor(root, "separate-verifier",
            toml='artifacts = ["/app/result"]\n\n[verifier]\nenvironment_mode = "separate"\n',
            solve="mkdir -p /app/result && echo 7 > /app/result/n; echo x > /app/scratch",
            cond='[ "$(cat /app/result/n)" = 7 ] && [ ! -e /app/scratch ]')
    expect["separate-verifier"] = "pass"
    _harbor(root, "reward-json", solve="echo ok > /app/ok",
            cond="true", test='#!/bin/bash\nif [ -f /app/ok ]; then echo \'{"reward": 1, '
            '"style": 0.5}\' > /logs/verifier/reward.json; else echo \'{"reward": 0}\' > '
            "/logs/verifier/reward.json; fi\n")
    expect["reward-json"] = "pass"
    _harbor(root, "healthcheck",
            toml='[environment.healthcheck]\ncommand = "test -f /srv/ready"\nretries = 2\n'
                 "interval_sec = 0\n",
            dockerfile="FROM ubuntu:24.04\nRUN mkdir -p /srv && touch /srv/ready\nWORKDIR /app\n",
            solve="touch /app/done", cond="[ -f /app/done ]")
    expect["healthcheck"] = "pass"
    _harbor(root, "newer-schema",
            toml='future_top_level = true\n[verifier]\ntimeout_sec = 120.0\nnew_knob = "x"\n'
                 '[environment]\ncpus = 1\nmemory_mb = 2048\nfuture = { a = 1 }\n'
                 '[metadata]\nauthor_name = "someone"\ndifficulty = "easy"\n'
                 '[task]\nname = "example/newer-schema"\nkeywords = ["k"]\n',
            solve="touch /app/done", cond="[ -f /app/done ]")
    expect["newer-schema"] = "pass"
    _harbor(root, "env-vars",
            toml='[environment.env]\nGREETING = "hi"\n[solution.env]\nANSWER = "42"\n'
                 '[verifier.env]\nEXPECTED = "42"\n',
            solve='echo "$GREETING $ANSWER" > /app/env.txt',
            cond='[ "$(cat /app/env.txt)" = "hi $EXPECTED" ]')
    expect["env-vars"] = "pass"
    _harbor(root, "python-image", dockerfile="FROM python:3.12-slim\nWORKDIR /app\n",
            solve="python3 -c 'print(6*7)' > /app/answer.txt",
            cond='[ "$(python3 -c "print(open(\'/app/answer.txt\').read().strip())")" = 42 ]')
    expect["python-image"] = "pass"
    steps = _harbor(root, "two-steps", toml='multi_step_reward_strategy = "mean"\n'
                    '[[steps]]\nname = "first"\n[[steps]]\nname = "second"\n',
                    solve="true", cond="true")
    for i, step in enumerate(("first", "second")):
        sd = steps / "steps" / step
        (sd / "tests").mkdir(parents=True)
        (sd / "solution").mkdir()
        (sd / "instruction.md").write_text(f"Step {step}: write /app/{step}.\n")
        (sd / "solution" / "solve.sh").write_text(f"#!/bin/bash\necho {i} > /app/{step}\n")
        (sd / "tests" / "test.sh").write_text(
            "#!/bin/bash\n" + REWARD.format(cond=f"[ -f /app/{step} ]"))
    expect["two-steps.first"] = "pass"
    expect["two-steps.second"] = "pass"
    _harbor(root, "gpu", toml="[environment]\ngpus = 1\n", solve="true", cond="true")
    expect["gpu"] = "skip"
    # MCP servers are read and recorded (an agent CLI is configured with them): the task runs
    _harbor(root, "mcp", toml='[[environment.mcp_servers]]\nname = "tools"\n'
            'url = "http://tools:8000/sse"\n', solve="touch /app/done", cond="[ -f /app/done ]")
    expect["mcp"] = "pass"
    _harbor(root, "needs-network", solve="touch /app/done",
            cond="[ -f /app/done ] && getent hosts pypi.org >/dev/null",
            test="#!/bin/bash\ngetent hosts pypi.org || echo 'Could not resolve host: pypi.org' "
            ">&2\n" + REWARD.format(cond="[ -f /app/done ] && getent hosts pypi.org >/dev/null"))
    expect["needs-network"] = "network"

    tb = root / "tb-swebench"
    (tb / "tests").mkdir(parents=True)
    (tb / "task.yaml").write_text(
        "instruction: Write 1 to /app/fixed.\nauthor: someone\nlanguage: python\n"
        "difficulty: easy\nparser_name: swebench\nmax_test_timeout_sec: 60\n")
    (tb / "Dockerfile").write_text("FROM --platform=linux/amd64 ubuntu:22.04\nWORKDIR /app\n")
    (tb / "solution.sh").write_text("#!/bin/bash\necho 1 > /app/fixed\n")
    (tb / "run-tests.sh").write_text(
        "#!/bin/bash\necho 'SWEBench results starts here'\n"
        "if [ -f /app/fixed ]; then echo PASSED; else echo FAILED; fi\n"
        "echo 'SWEBench results ends here'\n")
    (tb / "tests" / "placeholder.txt").write_text("tests live in run-tests.sh\n")
    expect["tb-swebench"] = "pass"
    return expect
