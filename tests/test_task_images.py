"""A task's prebuilt image (Harbor ``environment.docker_image``, Terminal-Bench compose ``image:``)
as the sandbox's base: pulled from a real registry by the docker backend; the local backend
(which unpacks registry images: tests/test_oci_images.py) refuses one it cannot have unless the
task also gives the Dockerfile it is built from."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from notices_capture import captured_notices
from registry_fixtures import registry_fixture  # noqa: F401
from taskgen import make_task

from agentmeter.agents.reference import OracleAgent
from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, RunSetupError, prepare, run
from agentmeter.runner.tasksandbox import sandbox_spec
from agentmeter.sandbox.docker import DockerBackend
from agentmeter.sandbox.dockerimage import BASE_TAG, ensure_base_image, layer_tag
from agentmeter.sandbox.images import adapted_digest
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import BaseImage, LayerBuildError, LayerSpec, SandboxError, SandboxSpec
from agentmeter.store.db import Store
from agentmeter.tasks.suite import load_task

#: the check every image task's verifier makes: the image's marker, and the oracle's file
TEST_SH = """#!/bin/bash
if [ "$(cat /opt/marker)" = "$MARKER" ] && [ "$(cat /app/done)" = 1000 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
#: accounts of the images (agentmeter's Debian base has no sandbox account of its own)
ACCOUNTS = {
    "agent-already": "useradd -m -u 1000 agent",
    "no-agent": "true",
    "no-agent-no-useradd": "rm /usr/sbin/useradd /usr/sbin/groupadd",
    "uid-1000-named-ubuntu": "useradd -m -u 1000 ubuntu",
    "agent-is-uid-1001": "useradd -m -u 1001 agent",
}


def _docker(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["docker", *args], input=stdin, capture_output=True,
                          env={**os.environ, "DOCKER_BUILDKIT": "0"})


def _image_id(ref: str) -> str | None:
    r = _docker("image", "inspect", "--format", "{{.Id}}", ref)
    return r.stdout.decode().strip() if r.returncode == 0 else None


class Images:
    """Builds test images and removes, at the end, every image and derived layer it made."""

    def __init__(self) -> None:
        self.refs: list[str] = []
        self.ids: list[str] = []

    def build(self, ref: str, dockerfile: str) -> str:
        with tempfile.TemporaryDirectory() as ctx:
            (Path(ctx) / "Dockerfile").write_text(dockerfile)
            r = _docker("build", "--force-rm", "--network", "none", "-t", ref, ctx)
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        return self.track(ref)

    def track(self, ref: str) -> str:
        found = _image_id(ref)
        assert found is not None
        self.refs.append(ref)
        self.ids.append(found)
        return found

    def marked(self, ref: str, marker: str, accounts: str = "true") -> str:
        return self.build(ref, f"FROM {BASE_TAG}\nRUN {accounts} && mkdir -p /app "
                               f"&& echo {marker} > /opt/marker\nWORKDIR /app\n")

    def push_and_forget(self, ref: str) -> None:
        """Push to the registry, then remove the local copy: only a pull can bring it back."""
        r = _docker("push", ref)
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        r = _docker("rmi", ref)
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        assert _image_id(ref) is None

    def remove_all(self) -> None:
        adapted = [layer_tag(adapted_digest(i)) for i in self.ids]
        _docker("rmi", "-f", *adapted, *self.refs)
        _docker("rmi", *self.ids)


@pytest.fixture
def images(docker_daemon: object) -> Iterator[Images]:
    asyncio.run(ensure_base_image())
    made = Images()
    yield made
    made.remove_all()


def _nonce() -> str:
    return uuid.uuid4().hex[:10]


@contextlib.contextmanager
def _refusing_port() -> Iterator[int]:
    """A loopback port that is bound but never listens: connections to it are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        yield port


def _image_task(root: Path, name: str, image: str, marker: str,
                dockerfile: str | None = None) -> Path:
    d = make_task(root, name, solve="id -u > /app/done", test=TEST_SH)
    if dockerfile is None:
        (d / "environment" / "Dockerfile").unlink()
        (d / "environment").rmdir()
    else:
        (d / "environment" / "Dockerfile").write_text(dockerfile)
    toml = (d / "task.toml").read_text()
    (d / "task.toml").write_text(toml + f'docker_image = "{image}"\n'
                                 f'[verifier.env]\nMARKER = "{marker}"\n')
    return d


async def _run_oracle(tmp_path: Path, suite: Path, backend: str) -> dict[str, tuple[TrialStatus, str]]:
    store = Store.open(tmp_path / "store")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(suite)], agents=["oracle"],
                                                 backend=backend, max_infra_retries=0)))
    return {t.task_id: (t.status, t.error or "") for t in store.latest_completed_trials(rid)}


# --- what the task says becomes the spec ---------------------------------------------------


def test_image_only_task_spec(tmp_path: Path) -> None:
    d = _image_task(tmp_path, "only-image", "example.org/env:1", "m")
    task = load_task(d)
    assert task.docker_image_origin == f"{d / 'task.toml'}: environment.docker_image"
    spec = sandbox_spec(task, OracleAgent(), None)
    assert spec.image == BaseImage(ref="example.org/env:1", origin=task.docker_image_origin)
    assert spec.layers == ()


def test_image_with_dockerfile_keeps_the_dockerfile_as_its_recipe(tmp_path: Path) -> None:
    d = _image_task(tmp_path, "both", "example.org/env:1", "m", dockerfile="FROM debian:trixie\n")
    spec = sandbox_spec(load_task(d), OracleAgent(), None)
    assert spec.image is not None and spec.image.recipe is not None
    assert spec.image.recipe.kind == "dockerfile"
    assert spec.image.recipe.origin == str(d.resolve() / "environment" / "Dockerfile")
    assert spec.layers == ()  # the recipe is the image's, not a layer on top of it


def test_terminal_bench_compose_image_names_its_origin(tmp_path: Path) -> None:
    src = Path(__file__).parent / "fixtures" / "tb-task"
    d = tmp_path / "tb-image"
    subprocess.run(["cp", "-r", str(src), str(d)], check=True)
    (d / "Dockerfile").unlink()
    (d / "docker-compose.yaml").write_text("services:\n  client:\n    image: example.org/tb:2\n")
    task = load_task(d)
    assert task.docker_image == "example.org/tb:2" and task.dockerfile is None
    assert task.docker_image_origin == f"{d.resolve() / 'docker-compose.yaml'}: services.client.image"


def test_docker_image_with_host_base_is_a_load_error(tmp_path: Path) -> None:
    from agentmeter.tasks.errors import TaskError

    d = _image_task(tmp_path, "host-image", "example.org/env:1", "m")
    (d / "task.toml").write_text((d / "task.toml").read_text().replace(
        "[environment]\n", '[environment]\nbase = "host"\n'))
    with pytest.raises(TaskError, match=r"task.toml: environment.base: a docker_image replaces"):
        load_task(d)


# --- the local backend -------------------------------------------------------------------


def test_local_backend_refuses_an_image_only_task_it_cannot_have(tmp_path: Path) -> None:
    with _refusing_port() as port:
        ref = f"127.0.0.1:{port}/env:1"
        d = _image_task(tmp_path / "suite", "only-image", ref, "m")
        with pytest.raises(RunSetupError) as err:
            prepare(RunRequest(suites=[str(tmp_path / "suite")], agents=["oracle"], backend="local"))
    text = str(err.value)
    assert f"{d.resolve() / 'task.toml'}: environment.docker_image" in text
    assert f"{ref!r}: no registry is reachable" in text and "--backend docker" in text
    assert "environment/Dockerfile" in text


async def test_local_backend_refuses_an_image_without_recipe(local_backend: LocalBackend) -> None:
    spec = SandboxSpec(image=BaseImage(ref="example.org/env:1", origin="t/task.toml: x"))
    with pytest.raises(SandboxError, match=r"t/task.toml: x: the local backend cannot use the "
                                           r"prebuilt image 'example.org/env:1'"):
        await local_backend.prepare(spec)


async def test_local_backend_builds_the_recipe(tmp_path: Path) -> None:
    d = _image_task(tmp_path / "suite", "both", "example.org/never-pulled:1", "recipe",
                    dockerfile="FROM debian:trixie\nRUN mkdir -p /app && echo recipe > /opt/marker"
                               "\nWORKDIR /app\n")
    assert load_task(d).dockerfile is not None
    result = await _run_oracle(tmp_path, tmp_path / "suite", "local")
    assert result == {"both": (TrialStatus.PASSED, "")}


# --- the docker backend --------------------------------------------------------------------


@pytest.mark.docker
async def test_image_only_task_is_pulled_and_the_oracle_passes(
        tmp_path: Path, registry: str, images: Images) -> None:
    marker = _nonce()
    ref = f"{registry}/agentmeter-test/env:{marker}"
    image_id = images.marked(ref, marker, ACCOUNTS["no-agent"])
    images.push_and_forget(ref)
    _image_task(tmp_path / "suite", "from-registry", ref, marker)
    result = await _run_oracle(tmp_path, tmp_path / "suite", "docker")
    assert result == {"from-registry": (TrialStatus.PASSED, "")}
    assert _image_id(ref) == image_id  # pulled: the very image that was pushed
    assert _image_id(layer_tag(adapted_digest(image_id))) is not None  # the account layer


@pytest.mark.docker
async def test_image_with_its_own_agent_user_runs(
        tmp_path: Path, registry: str, images: Images) -> None:
    marker = _nonce()
    ref = f"{registry}/agentmeter-test/with-agent:{marker}"
    images.marked(ref, marker, ACCOUNTS["agent-already"])
    images.push_and_forget(ref)
    _image_task(tmp_path / "suite", "has-agent", ref, marker)
    result = await _run_oracle(tmp_path, tmp_path / "suite", "docker")
    assert result == {"has-agent": (TrialStatus.PASSED, "")}


@pytest.mark.docker
async def test_missing_image_makes_the_trial_infra_invalid(
        tmp_path: Path, registry: str, docker_daemon: object) -> None:
    ref = f"{registry}/agentmeter-test/absent:{_nonce()}"
    d = _image_task(tmp_path / "suite", "absent-image", ref, "m")
    result = await _run_oracle(tmp_path, tmp_path / "suite", "docker")
    status, error = result["absent-image"]
    assert status is TrialStatus.INFRA_INVALID
    assert f"{d.resolve() / 'task.toml'}: environment.docker_image: image {ref!r}" in error
    assert "the registry has no such image" in error and "docker load" in error


@pytest.mark.docker
async def test_unreachable_registry_is_said_so(docker_daemon: object) -> None:
    with _refusing_port() as port:
        image = BaseImage(ref=f"127.0.0.1:{port}/nowhere/env:1", origin="t/task.toml: x")
        with pytest.raises(SandboxError) as err:
            await DockerBackend().prepare(SandboxSpec(image=image))
    assert "t/task.toml: x: image '127.0.0.1:" in str(err.value)
    assert "no registry is reachable" in str(err.value)


@pytest.mark.docker
@pytest.mark.parametrize("accounts", sorted(ACCOUNTS))
async def test_every_image_gets_a_uid_1000_agent_with_home(images: Images, accounts: str) -> None:
    ref = f"agentmeter-test/accounts-{accounts}:{_nonce()}"
    images.marked(ref, "m", ACCOUNTS[accounts])
    box = await DockerBackend().start(SandboxSpec(image=BaseImage(ref=ref), user="agent"))
    try:
        r = await box.exec('id -u; id -g; id -un; echo "$HOME"')
        uid, gid, name, home = r.stdout.split()
        assert (uid, gid) == ("1000", "1000"), r
        expected = {"uid-1000-named-ubuntu": "ubuntu", "agent-is-uid-1001": "agentmeter"}
        assert name == expected.get(accounts, "agent")
        for path in (f"{home}/x", "/home/agent/x", "/workspace/x"):  # /home/agent: agents' HOME
            assert (await box.exec(["touch", path])).ok, path
        passwd = (await box.exec("cat /etc/passwd")).stdout.splitlines()
        assert [ln.split(":")[2] for ln in passwd].count("1000") == 1  # never a second uid 1000
        assert box.workdir == "/app"
    finally:
        await box.stop()


@pytest.mark.docker
async def test_image_is_preferred_over_its_recipe_and_the_recipe_is_the_fallback(
        images: Images) -> None:
    ref = f"agentmeter-test/prebuilt:{_nonce()}"
    images.marked(ref, "prebuilt")
    recipe = LayerSpec(kind="dockerfile", origin="t/environment/Dockerfile",
                       source="FROM debian:trixie\nRUN echo recipe > /opt/marker\n")
    spec = SandboxSpec(image=BaseImage(ref=ref, recipe=recipe))
    box = await DockerBackend().start(spec)
    try:
        assert (await box.read_file("/opt/marker")) == b"prebuilt\n"
    finally:
        await box.stop()
    absent = SandboxSpec(image=BaseImage(ref=f"agentmeter-test/absent:{_nonce()}", recipe=recipe))
    with captured_notices() as said:
        box = await DockerBackend().start(absent)
    assert any("building t/environment/Dockerfile on agentmeter's" in n for n in said), said
    try:
        assert (await box.read_file("/opt/marker")) == b"recipe\n"
    finally:
        await box.stop()


@pytest.mark.docker
async def test_a_retagged_image_gets_its_own_derived_layers(images: Images) -> None:
    ref = f"agentmeter-test/retagged:{_nonce()}"
    first = images.marked(ref, "first")
    box = await DockerBackend().start(SandboxSpec(image=BaseImage(ref=ref)))
    await box.stop()
    second = images.marked(ref, "second")  # the same name, now another image
    assert first != second
    box = await DockerBackend().start(SandboxSpec(image=BaseImage(ref=ref)))
    try:
        assert (await box.read_file("/opt/marker")) == b"second\n"
    finally:
        await box.stop()
    assert _image_id(layer_tag(adapted_digest(first))) is not None
    assert _image_id(layer_tag(adapted_digest(second))) is not None


@pytest.mark.docker
async def test_image_without_bash_or_shell_is_refused_clearly(images: Images) -> None:
    # a tiny tree: dash as /bin/sh with its libraries, nothing else
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for src in ("/bin/dash", *_libraries("/bin/dash")):
            dst = root / src.lstrip("/")
            dst.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-L", src, str(dst)], check=True)
        (root / "bin" / "sh").symlink_to("dash")
        (root / "etc").mkdir()
        tar = subprocess.run(["tar", "-C", tmp, "-cf", "-", "."], capture_output=True, check=True)
    ref = f"agentmeter-test/dash-only:{_nonce()}"
    assert _docker("import", "-", ref, stdin=tar.stdout).returncode == 0
    images.track(ref)
    with pytest.raises(SandboxError) as err:
        await DockerBackend().prepare(SandboxSpec(image=BaseImage(ref=ref, origin="t: image")))
    assert f"t: image: image {ref!r} lacks what every sandbox command relies on: bash" in str(err.value)

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "hello.txt").write_text("no shell here\n")
        empty = subprocess.run(["tar", "-C", tmp, "-cf", "-", "."], capture_output=True,
                               check=True).stdout
    ref2 = f"agentmeter-test/no-shell:{_nonce()}"
    assert _docker("import", "-", ref2, stdin=empty).returncode == 0
    images.track(ref2)
    with pytest.raises(SandboxError, match=r"has no /bin/sh"):
        await DockerBackend().prepare(SandboxSpec(image=BaseImage(ref=ref2)))


def _libraries(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return [w for line in out.splitlines() for w in line.split() if w.startswith("/")]


@pytest.mark.docker
async def test_agent_install_failing_on_a_foreign_image_says_why(images: Images) -> None:
    ref = f"agentmeter-test/no-apt:{_nonce()}"
    images.build(ref, f"FROM {BASE_TAG}\nRUN rm /usr/bin/apt-get\n")
    install = LayerSpec(kind="script", independent=True, label="agent demo 1.0 (apt)",
                        source="apt-get update -qq\n")
    spec = SandboxSpec(image=BaseImage(ref=ref, origin="t/task.toml: x"), layers=(install,))
    with pytest.raises(LayerBuildError) as err:
        await DockerBackend().prepare(spec)
    text = str(err.value)
    assert text.startswith("agent demo 1.0 (apt): this agent install is written for agentmeter's "
                           f"Debian base (apt-get, glibc) and failed on the task's image {ref!r}")
    assert "apt-get" in text.splitlines()[-1]
