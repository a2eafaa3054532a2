"""A task's prebuilt image as the docker backend's base (see ``SandboxSpec.image``).

The image is used as it is on the daemon when present (a tag is never refreshed), else pulled
with ``docker pull``; when that fails the error names the image, the file that named it and why.
Before task and agent layers are built on it, one derived layer adapts it to the sandbox
contract: it checks the tools every sandbox command relies on (bash, GNU find, tar) and adds the
unprivileged account (uid/gid 1000, home ``/home/agent``) and the harness directories when the
image lacks them. That layer, and so every layer above it, is keyed by the image's id: an image
re-tagged or re-pulled under the same name gets its own derived layers.

When the image cannot be had and the task gives the Dockerfile it was built from (its recipe),
the recipe is built on agentmeter's Debian base instead, with a notice.

The adapt step is not only for a task's image: both backends run ADAPT_SCRIPT as the layer right
after a task environment's own layers (on its image, on a Dockerfile's real FROM image, or on
agentmeter's Debian base, which has no sandbox account of its own), so an environment may create
users of its own, 'agent' included. Agent installs are built on top of it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentmeter.notices import notice
from agentmeter.sandbox import oci
from agentmeter.sandbox.dockercli import docker
from agentmeter.sandbox.dockerfile import image_emulation
from agentmeter.sandbox.dockerimage import base_digest, image_config, image_exists, layer_tag
from agentmeter.sandbox.spec import (
    AGENT_GID,
    AGENT_UID,
    AGENT_USER,
    RECIPE_HINT,
    BaseImage,
    LayerBuildError,
    LayerSpec,
    SandboxError,
)

#: bump when ADAPT_SCRIPT changes, so images are adapted again
#: (2: run after the environment's layers, on every root; /logs/artifacts for the agent)
ADAPT_FORMAT = 2
_MISSING = "__agentmeter_missing__"
AGENT_HOME = f"/home/{AGENT_USER}"

#: POSIX sh, run as root in the image. An account that already has uid 1000 is kept whatever
#: its name; a name 'agent' already taken by another uid makes the new account 'agentmeter'.
ADAPT_SCRIPT = f"""\
set -e
uid={AGENT_UID}; gid={AGENT_GID}; name={AGENT_USER}; home={AGENT_HOME}
missing=""
command -v bash >/dev/null 2>&1 || missing="$missing bash"
find / -maxdepth 0 -printf '' >/dev/null 2>&1 || missing="$missing GNU-find(-printf)"
command -v tar >/dev/null 2>&1 || missing="$missing tar"
if [ -n "$missing" ]; then echo "{_MISSING}$missing"; exit 3; fi
has() {{  # has FILE COLUMN VALUE: a line of FILE holds VALUE in COLUMN (1 = name, 3 = id)
  [ -f "$1" ] || return 1
  while IFS=: read -r f1 f2 f3 rest; do
    if [ "$2" = 1 ] && [ "$f1" = "$3" ]; then return 0; fi
    if [ "$2" = 3 ] && [ "$f3" = "$3" ]; then return 0; fi
  done < "$1"
  return 1
}}
free_name() {{ if has "$1" 1 "$name"; then echo agentmeter; else echo "$name"; fi; }}
if ! has /etc/group 3 "$gid"; then
  g=$(free_name /etc/group)
  if command -v groupadd >/dev/null 2>&1; then groupadd -g "$gid" "$g"
  else echo "$g:x:$gid:" >> /etc/group; fi
fi
created=""
if ! has /etc/passwd 3 "$uid"; then
  u=$(free_name /etc/passwd); created=1
  if command -v useradd >/dev/null 2>&1; then
    useradd -u "$uid" -g "$gid" -M -d "$home" -s "$(command -v bash)" "$u"
  else
    echo "$u:x:$uid:$gid::$home:$(command -v bash)" >> /etc/passwd
    if [ -f /etc/shadow ]; then echo "$u:!:19000:0:99999:7:::" >> /etc/shadow; fi
  fi
fi
# agents use $home whatever the account's name: it must exist and belong to uid 1000
if [ -n "$created" ] || [ ! -d "$home" ]; then mkdir -p "$home"; chown "$uid:$gid" "$home"; fi
if [ ! -d /logs ]; then mkdir -p /logs; chmod 755 /logs; fi
for d in /workspace /logs/agent; do
  if [ ! -d "$d" ]; then mkdir -p "$d"; chown "$uid:$gid" "$d"; fi
done
mkdir -p /logs/verifier /logs/artifacts
chown "$uid:$gid" /logs/artifacts
"""

_UNREACHABLE = re.compile(r"no such host|connection refused|i/o timeout|network is unreachable|"
                          r"TLS handshake timeout|server misbehaving|dial tcp|no route to host",
                          re.IGNORECASE)
_ABSENT = re.compile(r"manifest unknown|not found|does not exist|pull access denied|"
                     r"unauthorized|denied", re.IGNORECASE)


@dataclass(frozen=True)
class Root:
    """Where a sandbox's layers start: an image and the chain digest that keys the layers above.

    ``tag`` None is agentmeter's Debian base (imported on first use); ``layers`` are built on the
    root before the spec's own (the recipe, when the task's image could not be had)."""

    tag: str | None
    digest: str
    image: BaseImage | None = None
    layers: tuple[LayerSpec, ...] = ()

    @property
    def foreign(self) -> bool:
        """The layers start from the task's image, not from agentmeter's Debian base."""
        return self.image is not None and not self.layers


DEBIAN_ROOT = Root(tag=None, digest=base_digest())


def _why(output: str) -> str:
    if "invalid reference format" in output:
        return "it is not a valid image reference"
    if _UNREACHABLE.search(output):
        return "no registry is reachable (offline, or the registry is down)"
    if _ABSENT.search(output):
        return "the registry has no such image (or it needs a login)"
    return "docker pull failed"


def _last_line(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return lines[-1][-500:] if lines else "(no output)"


async def local_image_id(ref: str) -> str | None:
    """The id of the image ``ref`` names on the daemon, or None."""
    res = await docker("image", "inspect", "--format", "{{.Id}}", ref, check=False)
    found = res.stdout.decode().strip()
    return found if res.returncode == 0 and found else None


async def obtain(image: BaseImage) -> str:
    """The id of the task's image: the daemon's copy, else pulled. Raises SandboxError."""
    found = await local_image_id(image.ref)
    if found is not None:
        return found
    try:  # fail fast when the registry cannot be reached (offline: name lookups stall)
        unreachable = await asyncio.to_thread(oci.probe, oci.parse_reference(image.ref))
    except oci.ImageUnavailable:
        unreachable = None  # docker says what is wrong with the name
    if unreachable is not None:
        raise SandboxError(
            f"{image.origin}: image {image.ref!r} is not on the Docker daemon and could not be "
            f"pulled: no registry is reachable ({unreachable}). Load it with 'docker load -i "
            f"FILE' (from 'docker save {image.ref}' where it exists), or give the task "
            f"{RECIPE_HINT} to build it instead")
    res = await docker("pull", "--quiet", image.ref, check=False)
    found = await local_image_id(image.ref) if res.returncode == 0 else None
    if found is not None:
        return found
    out = res.text()
    why = f"{_why(out)} ({_last_line(out)})"
    if "invalid reference format" in out:
        raise SandboxError(f"{image.origin}: image {image.ref!r}: {why}")
    raise SandboxError(
        f"{image.origin}: image {image.ref!r} is not on the Docker daemon and could not be "
        f"pulled: {why}. Load it with 'docker load -i FILE' (from 'docker save {image.ref}' "
        f"where it exists), or give the task {RECIPE_HINT} to build it instead")


def image_digest(image_id: str) -> str:
    """The chain digest of a root that is the image ``image_id`` itself."""
    return hashlib.sha256(f"docker-image\0{image_id}".encode()).hexdigest()


def adapt_digest(parent_digest: str) -> str:
    """The chain digest of the adapt layer on the chain ``parent_digest``."""
    return hashlib.sha256(f"{parent_digest}\0adapt-v{ADAPT_FORMAT}".encode()).hexdigest()


def adapted_digest(image_id: str) -> str:
    """The adapt layer right on the image ``image_id`` (a task image with no layers of its own)."""
    return adapt_digest(image_digest(image_id))


async def ensure_adapted(parent: str, digest: str, where: str, labels: list[str]) -> str:
    """The tag of ``parent`` with the sandbox account and directories (built once per chain)."""
    tag = layer_tag(digest)
    if not await image_exists(tag):
        user = (await image_config(parent)).user or "0"  # numeric: the image may lack passwd
        dockerfile = (f"FROM {parent}\nUSER 0\n"
                      f"RUN {json.dumps(['/bin/sh', '-c', ADAPT_SCRIPT])}\n"
                      f"USER {user}\nLABEL agentmeter.adapt={ADAPT_FORMAT}\n")
        with tempfile.TemporaryDirectory(prefix="agentmeter-adapt-") as tmp:
            (Path(tmp) / "Dockerfile").write_text(dockerfile)
            res = await docker("build", "--force-rm", "--network", "none", *labels, "-t", tag,
                               tmp, env={"DOCKER_BUILDKIT": "0"}, check=False)
        if res.returncode != 0:
            raise adapt_error(where, res.text())
    return tag


def adapt_error(where: str, out: str) -> SandboxError:
    """Why the adapt step failed on the root ``where`` names, from its output."""
    for ln in out.splitlines():
        if ln.startswith(_MISSING):
            return SandboxError(
                f"{where} lacks what every sandbox command relies on:{ln[len(_MISSING):]} "
                f"(sandboxes run commands with bash, list files with GNU find and "
                f"copy with tar). Use an image that has them")
    if "/bin/sh" in out and ("no such file" in out.lower() or "not found" in out.lower()):
        raise SandboxError(f"{where} has no /bin/sh, so it cannot host a sandbox "
                           f"({_last_line(out)})")
    raise SandboxError(f"{where}: adding the sandbox account (uid {AGENT_UID}) failed: "
                       f"{_last_line(out)}")


async def resolve(image: BaseImage | None, labels: list[str]) -> Root:
    """The root a spec's layers start from: the adapted task image, or the Debian base (with
    the image's recipe on it when the image cannot be had)."""
    if image is None:
        return DEBIAN_ROOT
    try:
        image_id = await obtain(image)
    except SandboxError as e:
        if image.recipe is None:
            raise
        notice(f"{e}; building {image.recipe.origin} on agentmeter's Debian base instead")
        return Root(tag=None, digest=DEBIAN_ROOT.digest, image=image, layers=(image.recipe,))
    return Root(tag=image_id, digest=image_digest(image_id), image=image)


async def from_root(ref: str, origin: str) -> Root | str | None:
    """A Dockerfile's FROM image as the root (the daemon's copy, else pulled); None for
    agentmeter's base itself; else why it cannot be had (then the Dockerfile is built on
    agentmeter's Debian base)."""
    if oci.same_as_base(ref):
        return None
    image = BaseImage(ref=ref, origin=origin)
    try:
        image_id = await obtain(image)
    except SandboxError as e:
        why = str(e).partition("could not be pulled: ")[2].partition(". Load it")[0]
        # as the local backend says it (oci.py): "no registry is reachable: cannot look up …"
        return re.sub(r"^no registry is reachable \((.*)\)$", r"no registry is reachable: \1",
                      why) or str(e)
    return Root(tag=image_id, digest=image_digest(image_id), image=image)


class RootCache:
    """The roots one backend (one run) resolved: each task image is looked up or pulled once,
    and an image that could not be had is not tried again."""

    def __init__(self) -> None:
        self._found: dict[BaseImage, Root | SandboxError] = {}
        self._from: dict[str, Root | str | None] = {}

    async def root(self, image: BaseImage | None, labels: list[str],
                   lock: asyncio.Lock) -> Root:
        if image is None:
            return DEBIAN_ROOT
        if image not in self._found:
            async with lock:
                if image not in self._found:
                    try:
                        self._found[image] = await resolve(image, labels)
                    except SandboxError as e:
                        self._found[image] = e
        found = self._found[image]
        if isinstance(found, SandboxError):
            raise SandboxError(str(found))
        return found

    async def from_root(self, ref: str, origin: str, lock: asyncio.Lock) -> Root | None:
        """A Dockerfile's FROM image as the root, looked up or pulled once (module from_root)."""
        if ref not in self._from:
            async with lock:
                if ref not in self._from:
                    self._from[ref] = await from_root(ref, origin)
        found = self._from[ref]
        if isinstance(found, str):  # said once per task (its origin), tried once per run
            oci.say_fallback(ref, origin, found)
            return None
        return found

    def stand_in_for(self, ref: str) -> str | None:
        """``REF: why it could not be had`` when :meth:`from_root` stood agentmeter's Debian
        base in for it and a step failing on it may fail for that (not :func:`faithful_stand_in`;
        as the local backend names it: layers.py), else None."""
        found = self._from.get(ref)
        return f"{ref}: {found}" if isinstance(found, str) and not faithful_stand_in(ref) \
            else None


def faithful_stand_in(image: str) -> bool:
    """Whether the Debian base stands in for ``image`` closely enough that a step failing on it
    fails for its own reasons (Debian, Ubuntu, and the runtimes image_emulation installs)."""
    name = image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]
    return name in ("debian", "ubuntu") or image_emulation(image) is not None


def foreign_install_error(root: Root, layer: LayerSpec, error: LayerBuildError) -> LayerBuildError:
    """An agent install (written for Debian) that failed on a task's own image, said so."""
    assert root.image is not None
    return LayerBuildError(
        f"{layer.label or layer.origin}: this agent install is written for agentmeter's Debian "
        f"base (apt-get, glibc) and failed on the task's image {root.image.ref!r} "
        f"({root.image.origin}); use an image based on Debian or Ubuntu, or install the agent in "
        f"the image. The install said:\n{error}")
