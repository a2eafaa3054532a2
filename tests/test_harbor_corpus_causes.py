"""Causes found running Harbor's own example tasks (../shared/corpora/harbor-examples), each
tested on a small copy of the shape of the corpus task that showed it (named in each test)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentmeter.cli import app
from agentmeter.sandbox.dockerfile import image_emulation, parse_dockerfile
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import LayerBuildError, LayerSpec, SandboxSpec
from agentmeter.tasks.errors import TaskError
from agentmeter.tasks.native import load_native_task
from agentmeter.tasks.suite import load_suite

REWARD = ('if {cond}; then echo 1 > /logs/verifier/reward.txt; '
          'else echo 0 > /logs/verifier/reward.txt; fi\n')


def _task(root: Path, name: str, *, toml: str = "", dockerfile: str = "FROM ubuntu:24.04\n",
          solve: str = "true", cond: str = "true", files: dict[str, str] | None = None) -> Path:
    d = root / name
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "task.toml").write_text('schema_version = "1.1"\n' + toml)
    (d / "instruction.md").write_text(f"{name}: do what solution/solve.sh does.\n")
    (d / "environment" / "Dockerfile").write_text(dockerfile)
    (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\nset -e\n{solve}\n")
    (d / "tests" / "test.sh").write_text("#!/bin/bash\nmkdir -p /logs/verifier\n"
                                         + REWARD.format(cond=cond))
    for rel, text in (files or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


# -- item 11: wrong refusals at load -------------------------------------------------------


def test_free_form_difficulty_loads(tmp_path: Path) -> None:
    """Harbor's [metadata] is free-form: 'middle' (the other public Harbor benchmark) loads."""
    d = _task(tmp_path, "middle", toml='[metadata]\ndifficulty = "middle"\n')
    task = load_native_task(d)
    assert task.difficulty == "middle" and task.tier is None
    assert load_native_task(_task(tmp_path, "e", toml='[metadata]\ndifficulty = "easy"\n')).tier == "easy"


def test_compose_overriding_only_main_is_one_container(tmp_path: Path) -> None:
    """hello-mcp's docker-compose.yaml minus its sidecar: a file that only overrides Harbor's
    ``main`` service loads (noticed); a sidecar whose build context has no Dockerfile is
    refused, naming it (sidecars that build run: tests/test_sidecars.py)."""
    single = _task(tmp_path, "single", files={"environment/docker-compose.yaml":
                                              "services:\n  main:\n    environment:\n"
                                              "      - A=1\n"})
    task = load_native_task(single)
    assert any("services.main.environment" in n for n in task.loader_notes), task.loader_notes
    multi = _task(tmp_path, "multi", files={"environment/docker-compose.yaml":
                                            "services:\n  main: {}\n  mcp-server:\n"
                                            "    build: {context: ./mcp-server}\n"})
    suite = load_suite(tmp_path)
    assert [t.id for t in suite.tasks] == ["single"]
    problems = " ".join(str(p) for s in suite.skipped for p in s.problems)
    assert "mcp-server" in problems and multi.name in {s.id for s in suite.skipped}


# -- items 3 and 4: the Dockerfile as docker builds it --------------------------------------


def test_env_path_expands_the_image_path() -> None:
    """``ENV PATH="/x:$PATH"`` (the other benchmark's tasks): $PATH is the base image's."""
    parsed = parse_dockerfile('FROM ubuntu:24.04\nENV PATH="/opt/x/bin:$PATH"\n'
                              'FROM ubuntu:24.04 AS two\nENV PATH=/y:$PATH\n', "Dockerfile")
    envs = [s.env["PATH"] for s in parsed.all_stages()]
    assert envs == ["/opt/x/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "/y:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]


async def test_env_path_then_run_on_local(local_backend: LocalBackend, tmp_path: Path) -> None:
    """The step after ``ENV PATH=…:$PATH`` finds mkdir (was: execvp mkdir: No such file)."""
    text = (f'FROM ubuntu:24.04\nENV PATH="/opt/{time.time_ns()}/bin:$PATH"\n'
            "RUN mkdir -p /opt/made && echo ok > /opt/made/f\n")
    layer = LayerSpec(kind="dockerfile", source=text, origin="p/Dockerfile", context=tmp_path)
    sb = await local_backend.start(SandboxSpec(layers=(layer,)))
    try:
        r = await sb.exec(["sh", "-c", "cat /opt/made/f && echo $PATH"], user="root")
        assert r.stdout.split() == ["ok", text.split('"')[1].replace("$PATH", "")
                                    + "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    finally:
        await sb.stop()


async def test_a_step_failing_on_a_stand_in_names_the_image(local_backend: LocalBackend,
                                                             tmp_path: Path) -> None:
    """hello-alpine (``FROM alpine``, no registry reachable): ``apk: not found`` on the Debian
    stand-in; the reason names the image and why it could not be had first."""
    text = f"FROM registry.invalid/x/alpine:3\nRUN apk add bash # {time.time_ns()}\n"
    layer = LayerSpec(kind="dockerfile", source=text, origin="a/Dockerfile", context=tmp_path,
                      network="none")
    with pytest.raises(LayerBuildError) as e:
        await local_backend.start(SandboxSpec(layers=(layer,)))
    assert str(e.value).startswith("registry.invalid/x/alpine:3: "), e.value
    assert "registry.invalid" in str(e.value).split(", so this step ran on agentmeter's Debian "
                                                   "stand-in for it and failed: ")[0], e.value
    assert "apk" in str(e.value), e.value


async def test_docker_names_a_stand_in_as_local_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """describe-image, hello-alpine, hello-world-openclaw on docker (no registry reachable):
    the reason names what the local backend names: the ``COPY --from`` image that could not be
    had, a FROM image the Debian base does not stand in for faithfully, and for Ubuntu nothing
    (its step fails for its own reasons). Unit level: no daemon."""
    from agentmeter.sandbox import images
    from agentmeter.sandbox.docker import DockerBackend

    async def unreachable(ref: str, origin: str) -> str:
        return "no registry is reachable: cannot look up ghcr.io"

    monkeypatch.setattr(images, "from_root", unreachable)
    text = "FROM ubuntu:24.04\nCOPY --from=ghcr.io/astral-sh/uv:latest /uv /bin/\n"
    layer = LayerSpec(kind="dockerfile", source=text, origin="d/Dockerfile")
    failed = 'd/Dockerfile:2: COPY --from=agentmeter-image-0 ["/uv", "/bin/"]: docker build failed'
    assert await DockerBackend()._copy_from_stand_in(layer, failed) == \
        "ghcr.io/astral-sh/uv:latest: no registry is reachable: cannot look up ghcr.io"
    assert await DockerBackend()._copy_from_stand_in(layer, "d/Dockerfile:1: RUN x: …") is None
    cache = images.RootCache()
    cache._from = {"alpine:3.22": "no registry is reachable: …", "ubuntu:24.04": "no registry…"}
    assert cache.stand_in_for("alpine:3.22") == "alpine:3.22: no registry is reachable: …"
    assert cache.stand_in_for("ubuntu:24.04") is None


def test_python_stand_in_has_no_pep668_lock() -> None:
    """hello-healthcheck and network-policy-matrix (FROM python:3.1x-slim): the stand-in's
    ``pip install`` must not meet Debian's externally-managed lock, as in the real image."""
    for image in ("python:3.13-slim", "python:3.12-slim"):
        run = image_emulation(image)
        assert run is not None and "EXTERNALLY-MANAGED" in run.split("&&")[-1]
    assert "EXTERNALLY-MANAGED" not in (image_emulation("node:22") or "")


# -- item 8: a step's setup.sh runs by path --------------------------------------------------


def _multi_step(root: Path) -> Path:
    """hello-multi-step-advanced's shape: step 2's workdir/setup.sh ends with ``rm -- "$0"``."""
    d = root / "steps-setup"
    (d / "environment").mkdir(parents=True)
    (d / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    (d / "task.toml").write_text(
        'version = "1.0"\nfuture_key = 1\n[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n')
    for step, solve, cond in (
            ("one", "echo a > /app/a.txt", "[ -f /app/a.txt ]"),
            ("two", "echo b > /app/b.txt",
             "[ -f /app/b.txt ] && [ -f /app/marker ] && [ ! -e /app/setup.sh ]")):
        s = d / "steps" / step
        for sub in ("tests", "solution"):
            (s / sub).mkdir(parents=True)
        (s / "instruction.md").write_text(f"step {step}\n")
        (s / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}\n")
        (s / "tests" / "test.sh").write_text("#!/bin/bash\nmkdir -p /logs/verifier\n"
                                             + REWARD.format(cond=cond))
    (d / "steps" / "two" / "workdir").mkdir()
    (d / "steps" / "two" / "workdir" / "setup.sh").write_text(
        '#!/bin/bash\nset -euo pipefail\ntouch /app/marker\nrm -- "$0"\n')
    return d


@pytest.mark.slow
def test_step_setup_sh_runs_by_path(tmp_path: Path) -> None:
    _multi_step(tmp_path / "suite")
    res = CliRunner().invoke(app, ["tasks", "check", str(tmp_path / "suite"), "--json",
                                   "--store", str(tmp_path / "runs")])
    out = json.loads(res.stdout)
    assert out["broken"] == [] and out["trivial"] == [], out
    # item 12: --json keeps the loader's notices
    assert any("future_key: unknown key" in n for n in out["notices"]), out


# -- items 5, 6, 9: verifier environments and networks of multi-step tasks -------------------


def _steps_task(root: Path, toml: str, steps: dict[str, str],
                files: dict[str, str] | None = None) -> Path:
    """A multi-step task: ``steps`` maps a step name to its solve.sh body."""
    d = root / "scenario"
    (d / "environment").mkdir(parents=True)
    (d / "environment" / "Dockerfile").write_text(
        "FROM ubuntu:24.04\nRUN echo agent-env > /agent-env-marker\n")
    (d / "tests").mkdir()
    (d / "task.toml").write_text('schema_version = "1.3"\n' + toml)
    for name, solve in steps.items():
        s = d / "steps" / name
        (s / "solution").mkdir(parents=True)
        (s / "instruction.md").write_text(f"step {name}\n")
        (s / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}\n")
    for rel, text in (files or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


#: verifier-mode-matrix/multistep-top-shared-mixed's shape: a shared step, then a step with its
#: own [steps.verifier.environment] built from the task's tests/Dockerfile
TOP_SHARED_MIXED = '''
[verifier]
environment_mode = "shared"
[environment]
network_mode = "no-network"
[[steps]]
name = "shared-inherited"
[[steps]]
name = "separate-step-env"
artifacts = ["/tmp/sep.txt"]
[steps.verifier.environment]
network_mode = "no-network"
'''
SEPARATE_TEST = ("#!/bin/bash\nmkdir -p /logs/verifier\n"
                 + REWARD.format(cond='[ "$(cat /tmp/sep.txt)" = sep ] && '
                                      '[ ! -e /agent-env-marker ] && [ -e /verifier-marker ]'))
SHARED_TEST = ("#!/bin/bash\nmkdir -p /logs/verifier\n"
               + REWARD.format(cond="[ -e /tmp/shared.txt ] && [ -e /agent-env-marker ]"))


def _top_shared_mixed(root: Path) -> Path:
    return _steps_task(root, TOP_SHARED_MIXED,
                       {"shared-inherited": "echo s > /tmp/shared.txt",
                        "separate-step-env": "echo sep > /tmp/sep.txt"},
                       {"steps/shared-inherited/tests/test.sh": SHARED_TEST,
                        "tests/test.sh": SEPARATE_TEST,
                        "tests/Dockerfile": "FROM ubuntu:24.04\n"
                                            "RUN echo v > /verifier-marker\n"})


def test_step_separate_verifier_loads(tmp_path: Path) -> None:
    """Which steps verify apart, from what, with which network (items 5 and 6)."""
    d = _top_shared_mixed(tmp_path)
    tasks = {t.id: t for t in load_suite(d.parent).tasks}
    shared, separate = tasks["scenario.shared-inherited"], tasks["scenario.separate-step-env"]
    assert shared.separate_verifier is None
    sep = separate.separate_verifier
    assert sep is not None and sep.dockerfile == d / "tests" / "Dockerfile"
    assert not sep.allow_internet and sep.allowed_hosts == ()
    assert [a.source for a in separate.artifacts] == ["/tmp/sep.txt"]
    assert not any("separate-step-env" in n or "artifacts" in n for n in separate.loader_notes)


def test_separate_verifier_network_from_its_environment(tmp_path: Path) -> None:
    """network-policy-matrix's e-ve / v-ve-diff: [verifier.environment] network_mode is the
    separate verifier's baseline; an allowlist stays an allowlist (was: no network)."""
    d = _task(tmp_path, "e-ve", toml='[environment]\nnetwork_mode = "no-network"\n'
                                     '[verifier.environment]\nnetwork_mode = "public"\n')
    sep = load_native_task(d).separate_verifier
    assert sep is not None and sep.allow_internet
    d = _task(tmp_path, "v-ve", toml='[verifier]\nnetwork_mode = "allowlist"\n'
                                     'allowed_hosts = ["Example.com."]\n'
                                     '[verifier.environment]\nnetwork_mode = "public"\n')
    sep = load_native_task(d).separate_verifier
    assert sep is not None and not sep.allow_internet and sep.allowed_hosts == ("example.com",)


def test_step_network_keys_are_honoured(tmp_path: Path) -> None:
    """network-policy-matrix's e-sa-same and sa-sv-diff: a step's network_mode is Harbor's key,
    not an unknown one: the same as the sandbox's runs, a different one is refused by key."""
    same = _steps_task(tmp_path / "a", '[environment]\nnetwork_mode = "no-network"\n'
                       '[[steps]]\nname = "one"\n[steps.agent]\nnetwork_mode = "no-network"\n',
                       {"one": "true"}, {"tests/test.sh": "#!/bin/bash\n"})
    (task,) = load_suite(same.parent).tasks
    assert not any("network_mode" in n for n in task.loader_notes), task.loader_notes
    _steps_task(tmp_path / "b", '[environment]\nnetwork_mode = "public"\n'
                '[[steps]]\nname = "one"\n[steps.agent]\nnetwork_mode = "no-network"\n',
                {"one": "true"}, {"tests/test.sh": "#!/bin/bash\n"})
    with pytest.raises(TaskError, match=r"steps\[0\]\.verifier\.network_mode: step 'one'"):
        load_suite(tmp_path / "b")  # its shared verifier keeps the public baseline


#: network-policy-matrix/dynamic/sa-sv-diff's shape: the environment's baseline is Harbor's
#: default (public); the step's agent and its (shared) verifier both state no-network
SA_SV_DIFF = '''
[environment]
cpus = 1
[[steps]]
name = "both-offline"
[steps.agent]
network_mode = "no-network"
[steps.verifier]
network_mode = "no-network"
'''


def test_scenario_whose_phases_agree_takes_their_network(tmp_path: Path) -> None:
    """sa-sv-diff was refused ("its agent's network (no-network) differs from the task's
    (public)") though no phase runs on the baseline: every phase agrees, so the scenario's
    sandbox takes their network. e-ve-sa-sv-diff's shape likewise: baseline no-network, the
    one in-sandbox phase public, the separate verifier its own allowlist."""
    _steps_task(tmp_path / "a", SA_SV_DIFF, {"both-offline": "true"},
                {"tests/test.sh": "#!/bin/bash\n"})
    (task,) = load_suite(tmp_path / "a").tasks
    assert (task.allow_internet, task.allowed_hosts, task.network_default) == (False, (), False)
    _steps_task(tmp_path / "b", '[verifier]\nenvironment_mode = "separate"\n'
                '[verifier.environment]\nnetwork_mode = "public"\n'
                '[environment]\nnetwork_mode = "no-network"\n'
                '[[steps]]\nname = "all-differ"\n[steps.agent]\nnetwork_mode = "public"\n'
                '[steps.verifier]\nnetwork_mode = "allowlist"\nallowed_hosts = ["www.iana.org"]\n',
                {"all-differ": "true"}, {"tests/test.sh": "#!/bin/bash\n"})
    (task,) = load_suite(tmp_path / "b").tasks
    sep = task.separate_verifier
    assert task.allow_internet and sep is not None
    assert (sep.allow_internet, sep.allowed_hosts) == (False, ("www.iana.org",))
    # an allowlist a step states is the sandbox's, named by its key
    _steps_task(tmp_path / "c", '[environment]\nnetwork_mode = "no-network"\n'
                '[verifier]\nnetwork_mode = "allowlist"\nallowed_hosts = ["a.example"]\n'
                '[[steps]]\nname = "one"\n[steps.agent]\nnetwork_mode = "allowlist"\n'
                'allowed_hosts = ["A.example"]\n', {"one": "true"},
                {"tests/test.sh": "#!/bin/bash\n"})
    (task,) = load_suite(tmp_path / "c").tasks
    assert task.allowed_hosts == ("a.example",) and not task.allow_internet
    assert task.allowed_hosts_origin is not None
    assert task.allowed_hosts_origin.endswith("steps[0].agent.allowed_hosts")
    # phases that disagree are still refused: step two's agent differs from step one's
    _steps_task(tmp_path / "d", SA_SV_DIFF + '[[steps]]\nname = "two"\n[steps.verifier]\n'
                'network_mode = "no-network"\n', {"both-offline": "true", "two": "true"},
                {"tests/test.sh": "#!/bin/bash\n"})
    with pytest.raises(TaskError, match=r"steps\[1\]\.agent\.network_mode: step 'two': its "
                       r"agent's network \(public\) differs from the scenario sandbox's "
                       r"\(no-network, step 'both-offline'"):
        load_suite(tmp_path / "d")


@pytest.mark.slow
def test_scenario_whose_phases_agree_runs_offline(tmp_path: Path) -> None:
    """sa-sv-diff's shape runs (was refused at load), its sandbox without a network interface
    but loopback for the agent and the shared verifier alike."""
    offline = "[ \"$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ')\" = lo ]"
    _steps_task(tmp_path / "suite", SA_SV_DIFF,
                {"both-offline": f"{offline} && echo blocked > /tmp/status"},
                {"steps/both-offline/tests/test.sh": "#!/bin/bash\nmkdir -p /logs/verifier\n"
                 + REWARD.format(cond=f"{offline} && [ \"$(cat /tmp/status)\" = blocked ]")})
    res = CliRunner().invoke(app, ["tasks", "check", str(tmp_path / "suite"), "--json",
                                   "--store", str(tmp_path / "runs")])
    out = json.loads(res.stdout)
    assert out["ran"] == 1 and out["broken"] == [] and out["trivial"] == [], out


@pytest.mark.slow
def test_step_separate_verifier_runs_apart(tmp_path: Path) -> None:
    """The separate step verifies in its own sandbox (tests/Dockerfile's marker, no agent
    environment marker, the step's artifact restored); the shared step in the agent's."""
    _top_shared_mixed(tmp_path / "suite")
    res = CliRunner().invoke(app, ["tasks", "check", str(tmp_path / "suite"), "--json",
                                   "--store", str(tmp_path / "runs")])
    out = json.loads(res.stdout)
    assert out["ran"] == 2 and out["broken"] == [] and out["trivial"] == [], out


# -- item 7: the image's ENTRYPOINT runs ------------------------------------------------------


@pytest.mark.slow
def test_entrypoint_service_meets_the_healthcheck(tmp_path: Path) -> None:
    """hello-healthcheck's shape: ENTRYPOINT starts a service (after a delay) that the
    healthcheck and the solution reach on localhost; it was never started."""
    entry = ("#!/bin/bash\n(sleep 1 && mkdir -p /srv && echo ok > /srv/state && "
             "while true; do sleep 1; done) &\nexec \"$@\"\n")
    _task(tmp_path / "suite", "healthcheck",
          toml='[environment.healthcheck]\ncommand = "test -f /srv/state"\ninterval_sec = 1\n'
               'start_period_sec = 3\nstart_interval_sec = 1\nretries = 2\n',
          dockerfile="FROM ubuntu:24.04\nWORKDIR /app\nCOPY entrypoint.sh /entrypoint.sh\n"
                     "RUN chmod +x /entrypoint.sh\nENTRYPOINT [\"/entrypoint.sh\"]\n",
          solve="cat /srv/state > /app/result.txt", cond="grep -q ok /app/result.txt",
          files={"environment/entrypoint.sh": entry})
    res = CliRunner().invoke(app, ["tasks", "check", str(tmp_path / "suite"), "--json",
                                   "--store", str(tmp_path / "runs")])
    out = json.loads(res.stdout)
    assert out["ran"] == 1 and out["broken"] == [] and out["trivial"] == [], out


# -- item 12: what is reported ----------------------------------------------------------------


def test_docker_image_task_is_not_told_its_dockerfile_is_missing(tmp_path: Path) -> None:
    """islo-network-policy-demo: it names a docker_image and no Dockerfile; it loads (its
    phases' networks are switched since 2026-11-29, no longer refused), its image the named one,
    and no 'needs a Dockerfile'."""
    d = tmp_path / "islo"
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "tests" / "test.sh").write_text("#!/bin/bash\n")
    (d / "instruction.md").write_text("x\n")
    (d / "task.toml").write_text('[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["a.b"]\n'
                                 '[environment]\nnetwork_mode = "public"\n'
                                 'docker_image = "ubuntu:24.04"\n')
    assert load_native_task(d).docker_image == "ubuntu:24.04"


@pytest.mark.slow
def test_oracle_crash_says_why(tmp_path: Path) -> None:
    """An oracle whose solve.sh fails is 'failed' with the reason (was: no reason at all)."""
    _task(tmp_path / "suite", "crash", solve="echo 'curl: (6) Could not resolve host' >&2; exit 6",
          cond="false")
    res = CliRunner().invoke(app, ["tasks", "check", str(tmp_path / "suite"), "--json",
                                   "--store", str(tmp_path / "runs")])
    out = json.loads(res.stdout)
    assert out["reasons"]["crash"].startswith("oracle failed (reward 0.0): solve.sh exited 6: "
                                              "curl: (6) Could not resolve host"), out


def test_nested_suite_is_not_a_failed_task(tmp_path: Path) -> None:
    """harbor-examples/network-policy-matrix and verifier-mode-matrix: a folder of tasks inside
    the suite is not a task that failed to load (Harbor skips it); a stray folder still is."""
    _task(tmp_path / "suite", "top")
    _task(tmp_path / "suite" / "matrix", "inner")
    (tmp_path / "suite" / "docs").mkdir()
    suite = load_suite(tmp_path / "suite")
    assert [t.id for t in suite.tasks] == ["top"]
    assert [k.id for k in suite.skipped] == ["docs"]


# -- item 10: a Terminal-Bench verifier's PATH is the image's ---------------------------------


@pytest.mark.slow
def test_terminal_bench_verifier_keeps_the_image_path(tmp_path: Path) -> None:
    """A task.yaml whose Dockerfile puts its tool on ``ENV PATH`` (the Terminal-Bench v1 adapted
    sets): run-tests.sh finds it (was: a fixed PATH without it)."""
    d = tmp_path / "suite" / "tb-path"
    (d / "tests").mkdir(parents=True)
    (d / "task.yaml").write_text("instruction: Write ok into /app/answer.\ndifficulty: easy\n"
                                 "parser_name: swebench\nmax_agent_timeout_sec: 60\n"
                                 "max_test_timeout_sec: 30\n")
    (d / "Dockerfile").write_text(
        "FROM debian:trixie\nWORKDIR /app\nRUN mkdir -p /opt/tool/bin && printf "
        "'#!/bin/sh\\ncat /app/answer\\n' > /opt/tool/bin/readanswer && chmod 755 "
        "/opt/tool/bin/readanswer\nENV PATH=/opt/tool/bin:$PATH\n")
    (d / "run-tests.sh").write_text(
        "#!/bin/bash\nif [ \"$(readanswer 2>&1)\" = ok ]; then v=PASSED; else v=FAILED; fi\n"
        "echo 'SWEBench results starts here'\necho $v\necho 'SWEBench results ends here'\n")
    (d / "solution.sh").write_text("#!/bin/bash\necho ok > /app/answer\n")
    res = CliRunner().invoke(app, ["tasks", "check", str(tmp_path / "suite"), "--json",
                                   "--store", str(tmp_path / "runs")])
    out = json.loads(res.stdout)
    assert out["ran"] == 1 and out["broken"] == [] and out["trivial"] == [], out
