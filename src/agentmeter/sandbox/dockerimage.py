"""The docker backend's images: agentmeter's Debian base imported into the daemon, what an
image says its containers default to, and the tags of cached layers.

agentmeter's own images are never pulled from a registry. The base is the debootstrap tree of
:func:`~agentmeter.sandbox.rootfs.ensure_debian_base` imported with ``docker import`` (a
Dockerfile's FROM is mapped onto it); each layer is an image on top of the previous one, tagged
by a digest of the whole chain, so a layer that was built once is found again by tag and never
rebuilt. A task's own prebuilt image, and a Dockerfile's FROM image, are used when the daemon
has them or can pull them (images.py); only when they cannot be had is the Debian base used.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from agentmeter.sandbox.dockercli import docker
from agentmeter.sandbox.idmap import unshifted
from agentmeter.sandbox.rootfs import BASE_ID, ensure_debian_base
from agentmeter.sandbox.spec import LayerSpec, SandboxError

BASE_REPO = "agentmeter-base"
LAYER_REPO = "agentmeter-layer"
#: the docker base: the local base with its ids shifted back (idmap.py), so a container's root
#: and agent own what they own on Docker (its processes are not in a shifted namespace)
DOCKER_BASE_ID = f"{BASE_ID}-ids0"
BASE_TAG = f"{BASE_REPO}:{DOCKER_BASE_ID}"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class ImageConfig:
    """What an image says its containers should default to."""

    tag: str
    workdir: str
    env: dict[str, str]
    user: str  # as written in the image ("" = root)
    volumes: tuple[str, ...] = ()  # its VOLUMEs (anonymous volumes of each container)


async def image_exists(tag: str) -> bool:
    res = await docker("image", "inspect", "--format", "{{.Id}}", tag, check=False)
    return res.returncode == 0


async def image_config(tag: str) -> ImageConfig:
    raw = (await docker("image", "inspect", "--format", "{{json .Config}}", tag)).stdout
    cfg = json.loads(raw or b"{}") or {}
    env = dict(e.partition("=")[::2] for e in (cfg.get("Env") or []))
    return ImageConfig(tag=tag, workdir=cfg.get("WorkingDir") or "", env=env,
                       user=cfg.get("User") or "", volumes=tuple(cfg.get("Volumes") or ()))


def _unshift(ti: tarfile.TarInfo) -> tarfile.TarInfo:
    ti.uid, ti.gid = unshifted(ti.uid), unshifted(ti.gid)
    ti.uname = ti.gname = ""
    return ti


def _import_unshifted(root: Path) -> tuple[int, bytes]:
    """``docker import`` of ``root`` as a tar stream whose owners are mapped back from the
    shifted ids (blocking; run in a thread). Returns docker's exit code and output."""
    changes = [f"ENV PATH={DEFAULT_PATH}", f"LABEL agentmeter.base={DOCKER_BASE_ID}"]
    cmd = ["docker", "import", *(a for c in changes for a in ("--change", c)), "-", BASE_TAG]
    with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            with tarfile.open(fileobj=proc.stdin, mode="w|", format=tarfile.GNU_FORMAT) as tar:
                for entry in sorted(os.listdir(root)):
                    tar.add(str(root / entry), arcname=entry, filter=_unshift)
        except BrokenPipeError:
            pass  # docker gave up: its output says why
        finally:
            proc.stdin.close()
        out = proc.stdout.read()
    return proc.returncode, out


async def ensure_base_image() -> str:
    """Import the debootstrap base once; returns its tag."""
    if await image_exists(BASE_TAG):
        return BASE_TAG
    root = await asyncio.to_thread(ensure_debian_base)
    code, out = await asyncio.to_thread(_import_unshifted, root)
    if code != 0:
        raise SandboxError("docker import of the Debian base failed: "
                           + out.decode(errors="replace")[-2000:])
    return BASE_TAG


def chain_digest(parent_digest: str, layer: LayerSpec) -> str:
    return hashlib.sha256(f"{parent_digest}\0{layer.recipe_digest()}".encode()).hexdigest()


def base_digest() -> str:
    return hashlib.sha256(f"docker-base\0{DOCKER_BASE_ID}".encode()).hexdigest()


def layer_tag(digest: str) -> str:
    return f"{LAYER_REPO}:{digest[:40]}"
