"""Real base images from a registry on both backends: a Dockerfile's FROM image (and a task's
``docker_image``) is used itself when it can be had, the sandbox account is added after the
environment's own layers (so an image's or a Dockerfile's own ``agent`` never clashes), and an
image that cannot be had falls back to agentmeter's Debian base with exactly one notice.

The test registry (tests/registry_fixtures.py) gets two images this module builds as OCI layouts
and pushes with skopeo: "alpinish" (busybox and static bash, GNU find and tar with a private
loader, /etc/os-release ID=alpine, no apt, no useradd, no util-linux) and "debianish" (the Debian
base plus an account 'agent' with uid 1001 and a tool of its own)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from registry_fixtures import registry_fixture  # noqa: F401
from taskgen import make_task

from agentmeter import notices
from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.sandbox import idmap, oci, rootfs
from agentmeter.sandbox.docker import DockerBackend
from agentmeter.sandbox.dockercli import OWNER_LABEL, owner_label
from agentmeter.sandbox.hosttools import ensure_tools
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import BaseImage, LayerSpec, SandboxSpec
from agentmeter.store.db import Store

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
TOOL = "#!/bin/sh\necho debianish-tool\n"


# --- building and pushing the two images ---------------------------------------------------

def _blob(blobs: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _layer(blobs: Path, root: Path, owner: Callable[[tarfile.TarInfo], tarfile.TarInfo]) -> dict[str, object]:
    tmp = blobs.parent.parent / "layer.tar"
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tar:
        for entry in sorted(os.listdir(root)):
            tar.add(str(root / entry), arcname=entry, filter=owner)
    h = hashlib.sha256()
    with open(tmp, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    size = tmp.stat().st_size
    tmp.rename(blobs / h.hexdigest())
    return {"mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": f"sha256:{h.hexdigest()}", "size": size}


def _root_owned(ti: tarfile.TarInfo) -> tarfile.TarInfo:
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def _unshift(ti: tarfile.TarInfo) -> tarfile.TarInfo:
    ti.uid, ti.gid = idmap.unshifted(ti.uid), idmap.unshifted(ti.gid)
    ti.uname = ti.gname = ""
    return ti


def _push(ref: str, layers: list[tuple[Path, Callable[[tarfile.TarInfo], tarfile.TarInfo]]],
          config: dict[str, object]) -> None:
    """An OCI layout of ``layers`` (uncompressed) and ``config``, copied to ``ref`` by skopeo."""
    with tempfile.TemporaryDirectory(prefix="agentmeter-oci-test-") as tmp:
        layout = Path(tmp) / "layout"
        blobs = layout / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        descs = [_layer(blobs, root, owner) for root, owner in layers]
        cfg = {"architecture": ARCH, "os": "linux", "config": config,
               "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in descs]}}
        cfg_desc = {"mediaType": "application/vnd.oci.image.config.v1+json",
                    **_blob(blobs, json.dumps(cfg).encode())}
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": cfg_desc, "layers": descs}
        man_desc = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                    **_blob(blobs, json.dumps(manifest).encode()),
                    "annotations": {"org.opencontainers.image.ref.name": "1"}}
        (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [man_desc]}))
        (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        r = subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false",
                            f"oci:{layout}:1", f"docker://{ref}"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def _libs(binary: str) -> list[tuple[str, str]]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        words = line.split()
        if "=>" in words and len(words) > 2 and words[2].startswith("/"):
            found.append((os.path.realpath(words[2]), words[0]))
        elif words and words[0].startswith("/"):
            found.append((os.path.realpath(words[0]), "ld.so"))
    return found


def _alpinish(root: Path) -> None:
    """busybox + static bash (also /bin/sh); GNU find and tar behind wrappers with their own loader (nothing
    of glibc in /lib, as on Alpine); ID=alpine; only root in /etc/passwd."""
    for d in ("bin", "usr/bin", "usr/lib/gnu", "etc", "root", "tmp", "proc", "dev", "sys"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "tmp", 0o1777)
    shutil.copy(_static("busybox") or "/bin/busybox", root / "bin" / "busybox")
    shutil.copy(_static("bash-static") or "/bin/bash-static", root / "bin" / "bash")
    # /bin/sh is bash: Debian's static busybox runs its own applets before PATH (GNU find)
    (root / "bin" / "sh").symlink_to("bash")
    for applet in ("cat", "chmod", "chown", "cp", "echo", "grep", "head", "id", "ls",
                   "mkdir", "mv", "rm", "sed", "touch", "dirname", "basename", "env", "sleep",
                   "tail", "wc", "ln", "true", "false", "test", "[", "stat", "awk"):
        (root / "bin" / applet).symlink_to("busybox")
    gnu = root / "usr" / "lib" / "gnu"
    for tool in ("find", "tar"):
        path = shutil.which(tool)
        assert path is not None
        shutil.copy(path, gnu / tool)
        for src, name in _libs(path):
            shutil.copy(src, gnu / name)
        (root / "usr" / "bin" / tool).write_text(
            f'#!/bin/sh\nexec /usr/lib/gnu/ld.so --library-path /usr/lib/gnu /usr/lib/gnu/{tool} "$@"\n')
        os.chmod(root / "usr" / "bin" / tool, 0o755)
    (root / "etc" / "os-release").write_text('NAME="Alpine-like"\nID=alpine\n')
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\n")


def _debianish_top(root: Path, base: Path) -> None:
    """The layer over the Debian base: an account 'agent' with uid 1001 and a tool."""
    (root / "etc").mkdir(parents=True)
    for name, line in (("passwd", "agent:x:1001:1001::/home/agent:/bin/bash\n"),
                       ("group", "agent:x:1001:\n"), ("shadow", "agent:!:19000:0:99999:7:::\n")):
        (root / "etc" / name).write_text((base / "etc" / name).read_text() + line)
    os.chmod(root / "etc" / "shadow", 0o640)
    (root / "home" / "agent").mkdir(parents=True)
    os.chown(root / "home" / "agent", 1001, 1001)
    (root / "usr" / "local" / "bin").mkdir(parents=True)
    (root / "usr" / "local" / "bin" / "debianish-tool").write_text(TOOL)
    os.chmod(root / "usr" / "local" / "bin" / "debianish-tool", 0o755)


def _busybox_only(root: Path) -> None:
    """A shell and little else: no bash, no GNU find or tar."""
    for d in ("bin", "etc", "tmp"):
        (root / d).mkdir(parents=True)
    shutil.copy(_static("busybox") or "/bin/busybox", root / "bin" / "busybox")
    for applet in ("sh", "mkdir", "cat", "echo", "find", "tar"):
        (root / "bin" / applet).symlink_to("busybox")
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")


def _is_static(path: str) -> bool:
    """An executable with no program interpreter (it runs in an image without glibc)."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    return head[:4] == b"\x7fELF" and b"/ld-linux" not in head and b"ld-musl" not in head


def _static(cmd: str) -> str | None:
    path = shutil.which(cmd)
    return path if path and _is_static(path) else None


def _install_host_tools() -> None:
    """What building the images needs on the host, installed by agentmeter's own installer
    (static busybox and bash go into the alpinish image; skopeo pushes)."""
    ensure_tools({"busybox": "busybox-static", "bash-static": "bash-static"}, "the OCI image tests",
                 find=_static)
    ensure_tools({"skopeo": "skopeo"}, "the OCI image tests")


def _cached_entries() -> set[Path]:
    return {*oci.oci_dir().glob("images/*"), *oci.oci_dir().glob("refs/*")}


@pytest.fixture(scope="module")
def images(registry: str) -> Iterator[dict[str, str]]:
    """``alpinish``, ``debianish`` and ``busybox-only``: their refs in the test registry. The
    trees the local backend unpacks from them are removed at the end."""
    _install_host_tools()
    before = _cached_entries()
    refs = {"alpinish": f"{registry}/alpinish:1", "debianish": f"{registry}/debianish:1",
            "busybox-only": f"{registry}/busybox-only:1"}
    base = rootfs.ensure_debian_base()
    with tempfile.TemporaryDirectory(prefix="agentmeter-oci-test-") as tmp:
        bb = Path(tmp) / "busybox-only"
        _busybox_only(bb)
        _push(refs["busybox-only"], [(bb, _root_owned)], {"Env": ["PATH=/bin"]})
        alp = Path(tmp) / "alpinish"
        _alpinish(alp)
        _push(refs["alpinish"], [(alp, _root_owned)],
              {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "WorkingDir": "/"})
        top = Path(tmp) / "debianish"
        _debianish_top(top, base)
        _push(refs["debianish"], [(base, _unshift), (top, lambda ti: ti)],
              {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                       "FROM_IMAGE=debianish"], "WorkingDir": "/srv"})
    yield refs
    for entry in _cached_entries() - before:
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


@pytest.fixture
def said() -> Iterator[list[str]]:
    """The notices said while the test runs."""
    got: list[str] = []
    notices.set_sink(got.append)
    yield got
    notices.set_sink(None)


@pytest.fixture
def docker_cleanup(docker_daemon: object) -> Iterator[list[str]]:
    """Removes, at the end, the images pulled and the layer images built during the test."""
    def layer_images() -> set[str]:
        # this process's only: other test files build layer images at the same time (xdist),
        # and removing one of theirs breaks their next start
        out = subprocess.run(["docker", "images", "-q", "--no-trunc", "--filter",
                              f"label={OWNER_LABEL}={owner_label()}", "agentmeter-layer"],
                             capture_output=True, text=True).stdout
        return set(out.split())

    before = layer_images()
    pulled: list[str] = []
    yield pulled
    subprocess.run(["docker", "rmi", "-f", *sorted(layer_images() - before)], capture_output=True)
    subprocess.run(["docker", "rmi", "-f", *pulled], capture_output=True)


# --- the task directories --------------------------------------------------------------------

def _suite(root: Path, images: dict[str, str]) -> Path:
    suite = root / "suite"
    # no useradd, no apt: the Dockerfile adds its own agent by hand (uid 1000: kept)
    make_task(suite, "alpinish",
              dockerfile=f"FROM {images['alpinish']}\n"
                         "RUN echo 'agent:x:1000:1000::/home/agent:/bin/sh' >> /etc/passwd "
                         "&& mkdir -p /app\nWORKDIR /app\n",
              solve='. /etc/os-release && echo "$ID" > /app/done',
              test='#!/bin/bash\nif [ "$(cat /app/done 2>/dev/null)" = alpine ] && '
                   '! command -v apt-get; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n')
    # the image's own 'agent' is uid 1001: the sandbox account is another name with uid 1000
    make_task(suite, "debianish",
              dockerfile=f"FROM {images['debianish']}\n"
                         "RUN test \"$(id -u agent)\" = 1001 && mkdir -p /app\nWORKDIR /app\n",
              solve="debianish-tool > /app/done && id -un >> /app/done",
              test='#!/bin/bash\nif [ "$(cat /app/done 2>/dev/null)" = "$(printf '
                   "'debianish-tool\\nagentmeter')\" ]; then echo 1; else echo 0; fi "
                   "> /logs/verifier/reward.txt\n")
    # the Debian base has no 'agent' of its own: a Dockerfile may add it
    make_task(suite, "useradd-agent",
              dockerfile="FROM debian:trixie\nRUN useradd -m -u 1000 -s /bin/bash agent "
                         "&& mkdir -p /app\nWORKDIR /app\n",
              solve="id -un > /app/done",
              test='#!/bin/bash\nif [ "$(cat /app/done 2>/dev/null)" = agent ]; then echo 1; '
                   "else echo 0; fi > /logs/verifier/reward.txt\n")
    return suite


async def _run(tmp_path: Path, suite: Path, backend: str) -> dict[tuple[str, str], tuple[TrialStatus, str]]:
    store = Store.open(tmp_path / "store")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(suite)], agents=["oracle", "nop"],
                                                 backend=backend, max_infra_retries=0,
                                                 concurrency=2)))
    agents = {c.id: c.agent.name for c in store.run_configs(rid)}
    return {(agents[t.config_id], t.task_id): (t.status, t.error or "")
            for t in store.latest_completed_trials(rid)}


def _expect_oracle_only(result: dict[tuple[str, str], tuple[TrialStatus, str]]) -> None:
    tasks = ("alpinish", "debianish", "useradd-agent")
    assert {k: v for k, v in result.items() if k[0] == "oracle"} == {
        ("oracle", t): (TrialStatus.PASSED, "") for t in tasks}
    assert {k: v[0] for k, v in result.items() if k[0] == "nop"} == {
        ("nop", t): TrialStatus.FAILED for t in tasks}


# --- the tests -------------------------------------------------------------------------------

async def test_local_oracle_passes_and_nop_fails_on_real_images(
        tmp_path: Path, images: dict[str, str], said: list[str]) -> None:
    result = await _run(tmp_path, _suite(tmp_path, images), "local")
    _expect_oracle_only(result)
    assert not [n for n in said if "FROM" in n], said  # no fallback


@pytest.mark.docker
async def test_docker_oracle_passes_and_nop_fails_on_real_images(
        tmp_path: Path, images: dict[str, str], said: list[str], docker_cleanup: list[str]) -> None:
    docker_cleanup += [images["alpinish"], images["debianish"]]
    result = await _run(tmp_path, _suite(tmp_path, images), "docker")
    _expect_oracle_only(result)
    assert not [n for n in said if "FROM" in n], said


async def test_local_agent_sees_the_image_itself(local_backend: LocalBackend,
                                                 images: dict[str, str]) -> None:
    dockerfile = LayerSpec(kind="dockerfile", origin="t/Dockerfile",
                           source=f"FROM {images['alpinish']}\n")
    box = await local_backend.start(SandboxSpec(layers=(dockerfile,), user="agent"))
    try:
        r = await box.exec("grep ^ID= /etc/os-release; id -u; echo $HOME; "
                           "touch /workspace/x /logs/artifacts/x $HOME/x && echo writable")
        assert r.stdout.split() == ["ID=alpine", "1000", "/home/agent", "writable"], r
        passwd = (await box.read_file("/etc/passwd")).decode()
        assert passwd.startswith("root:x:0:0:") and ":1000:1000:" in passwd  # adapted: no useradd
    finally:
        await box.stop()


async def test_local_installs_are_built_on_the_image_plus_the_account(
        local_backend: LocalBackend, images: dict[str, str]) -> None:
    """An independent layer (an agent install) is built on the image and the adapt step, not
    on the Debian base, and stacked over the environment's own layers."""
    env = LayerSpec(kind="dockerfile", origin="t/Dockerfile",
                    source=f"FROM {images['alpinish']}\nRUN echo env > /opt-env\n")
    install = LayerSpec(kind="script", independent=True, label="agent demo", network="none",
                        source=". /etc/os-release; echo \"$ID $(stat -c %u /home/agent)\" "
                               "> /opt-install\n")
    box = await local_backend.start(SandboxSpec(layers=(env, install)))
    try:
        r = await box.exec("cat /opt-env /opt-install")
        assert r.stdout.splitlines() == ["env", "alpine 1000"], r
    finally:
        await box.stop()


async def test_local_refuses_an_image_without_bash_find_tar(local_backend: LocalBackend,
                                                            images: dict[str, str]) -> None:
    from agentmeter.sandbox.spec import SandboxError

    spec = SandboxSpec(image=BaseImage(ref=images["busybox-only"], origin="t/task.toml: x"))
    with pytest.raises(SandboxError) as err:
        await local_backend.prepare(spec)
    assert f"image {images['busybox-only']!r} lacks what every sandbox command relies on: bash " \
           "GNU-find(-printf)" in str(err.value)


async def test_local_docker_image_is_pulled_with_its_config(local_backend: LocalBackend,
                                                            images: dict[str, str]) -> None:
    """A task's docker_image on the local backend: no recipe needed when it can be had; the
    image's WorkingDir and Env hold in the sandbox; its own 'agent' (uid 1001) is kept."""
    spec = SandboxSpec(image=BaseImage(ref=images["debianish"], origin="t/task.toml: x"),
                       user="agent")
    box = await local_backend.start(spec)
    try:
        assert box.workdir == "/srv"
        r = await box.exec('echo "$FROM_IMAGE"; id -un; id -u agent; debianish-tool')
        assert r.stdout.split() == ["debianish", "agentmeter", "1001", "debianish-tool"], r
    finally:
        await box.stop()


def _refusing_port() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    return s


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
async def test_unreachable_image_falls_back_with_one_notice_per_task(
        request: pytest.FixtureRequest, backend: str, said: list[str]) -> None:
    with _refusing_port() as s:
        ref = f"127.0.0.1:{s.getsockname()[1]}/nowhere/env:1"
        if backend == "docker":
            request.getfixturevalue("docker_daemon")
            box_backend: LocalBackend | DockerBackend = DockerBackend()
        else:
            box_backend = request.getfixturevalue("local_backend")
        for name in ("a", "b", "a"):  # a notice per task, said once however often it starts
            layer = LayerSpec(kind="dockerfile", origin=f"{name}/Dockerfile",
                              source=f"FROM {ref}\nRUN echo {name} > /opt/which\n")
            box = await box_backend.start(SandboxSpec(layers=(layer,)))
            try:
                r = await box.exec("grep ^ID= /etc/os-release; cat /opt/which")
                assert r.stdout.split() == ["ID=debian", name], r  # the fallback
            finally:
                await box.stop()
    mine = [n for n in said if ref in n]
    assert len(mine) == 2, said
    assert mine[0].startswith(f"a/Dockerfile:1: FROM {ref}: ") and "Debian" in mine[0]
    assert mine[1].startswith(f"b/Dockerfile:1: FROM {ref}: ")
    assert "cannot connect" in mine[0] or "no registry is reachable" in mine[0]


def test_references_are_normalized_as_docker_does() -> None:
    r = oci.parse_reference("python:3.12-slim")
    assert (r.registry, r.repository, r.tag, r.endpoint) == (
        "docker.io", "library/python", "3.12-slim", "registry-1.docker.io")
    r = oci.parse_reference("127.0.0.1:5000/team/env@sha256:" + "a" * 64)
    assert (r.host, r.port, r.loopback, r.tag) == ("127.0.0.1", 5000, True, None)
    assert r.transport() == "docker://127.0.0.1:5000/team/env@sha256:" + "a" * 64
    r = oci.parse_reference("localhost:5000/env")
    assert (r.registry, r.tag, r.loopback) == ("localhost:5000", "latest", True)
    assert not oci.parse_reference("ghcr.io/org/img:1").loopback
    with pytest.raises(oci.ImageUnavailable):
        oci.parse_reference("Not/Valid")


def test_cached_tree_is_complete_and_shifted(images: dict[str, str]) -> None:
    img = asyncio.run(asyncio.to_thread(oci.obtain, images["debianish"]))
    assert img.digest.startswith("sha256:") and (img.rootfs / "usr" / "bin" / "bash").exists()
    if os.geteuid() == 0:  # owners in the sandbox range: uid 1001 inside is SHIFT_BASE + 1001
        assert (img.rootfs / "home" / "agent").stat().st_uid == idmap.SHIFT_BASE + 1001
    assert not list(oci.oci_dir().glob(".build-*"))
