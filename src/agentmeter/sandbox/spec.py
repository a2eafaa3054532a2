"""What a sandbox is asked to be (SandboxSpec) and what it reports back (ExecResult, FsDiff).

These models are shared by every backend; nothing here knows how a sandbox is made.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentmeter.sandbox import droppings

BaseName = Literal["debian", "host"]
#: "none": loopback only; "full": the internet (never the host's loopback); "allowlist": loopback
#: only, plus the harness's proxy admitting ``SandboxSpec.allowed_hosts`` (proxy.py)
NetworkPolicy = Literal["none", "full", "allowlist"]
#: a layer build step's network
LayerNetwork = Literal["none", "full"]

#: The unprivileged account agent processes run as inside a sandbox.
AGENT_USER = "agent"
#: the PATH the harness's own commands inside a sandbox are looked up on, never the image's:
#: a directory the agent can write first on that (a venv in its workdir) would give root the
#: agent's ``sh``, ``mkdir``, ``python3`` (security review 4)
HARNESS_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: the environment of those commands: HARNESS_PATH, no start-up file, preload or library path
#: of the image's (an ``LD_LIBRARY_PATH`` the agent writes gives root its ``libc.so.6``); an
#: empty value is no value to bash, dash, glibc's and musl's loader
HARNESS_ENV = {"PATH": HARNESS_PATH, "BASH_ENV": "", "ENV": "", "LD_PRELOAD": "",
               "LD_LIBRARY_PATH": "", "LD_AUDIT": ""}
#: HARNESS_ENV as ``docker exec`` options
HARNESS_ENV_ARGS = tuple(a for k, v in HARNESS_ENV.items() for a in ("-e", f"{k}={v}"))
_BASH_LAUNCH = (f'img=$PATH; PATH={HARNESS_PATH}; b=$(command -v bash) || b=bash; PATH=$img; '
                'exec "$b" -c \'case $0 in /*) hash -p "$0" bash;; esac; eval "$1"\' "$b" "$1"')


#: directories whose programs and libraries root runs in a sandbox: never the agent's
_SYSTEM_DIRS = (*HARNESS_PATH.split(":"), "/etc", "/lib", "/lib64", "/usr/lib", "/usr/lib64",
                "/usr/libexec", "/usr/local/lib")


def agent_workdir_problem(workdir: str) -> str | None:
    """Why ``workdir`` cannot be given to the agent's account (the runner ``chown -R``s it),
    or None: it is, holds or lies in a directory of HARNESS_PATH or the system's libraries
    (``WORKDIR /usr/local`` gave the agent ``/usr/local/sbin``, whose ``sh`` the harness's
    root steps then ran)."""
    w = os.path.normpath(workdir)
    for d in _SYSTEM_DIRS:
        if w == "/" or d == w or d.startswith(w + "/") or w.startswith(d + "/"):
            return (f"the workdir {workdir} holds the system's programs ({d}): it is not given "
                    "to the agent's account")
    return None


def harness_bash(command: str) -> list[str]:
    """An argv running a task's shell ``command`` as ``bash -c`` would, with the image's PATH,
    but ``bash`` (the shell it runs in, and the one it names: ``bash /tests/test.sh``) looked up
    on HARNESS_PATH first: for a task's commands the harness runs as root after the agent."""
    return ["/bin/sh", "-c", _BASH_LAUNCH, "sh", command]
AGENT_UID = 1000
AGENT_GID = 1000
#: ``SandboxSpec.agent_user``: the image's final ``USER`` (root when it sets none), as Harbor
#: runs its agents ('@' is in no account name)
IMAGE_USER = "@image"

#: Default cap on captured stdout/stderr per stream (bytes).
DEFAULT_OUTPUT_LIMIT = 1_000_000


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Limits(_Frozen):
    """Resource limits applied to every process of a sandbox."""

    memory_mb: int | None = Field(default=None, gt=0, description="memory cap (cgroup)")
    pids: int | None = Field(default=None, gt=0, description="max processes/threads (cgroup)")
    cpus: float | None = Field(default=None, gt=0, description="CPU count (cgroup quota)")
    disk_mb: int | None = Field(default=None, gt=0, description="cap on the writable layer")


#: What a trial's sandbox gets where its task sets no limit (README, "Task format"). Memory
#: and processes are cgroup limits (memory without swap). Disk is the cap on the writable layer:
#: on the local backend a tmpfs, i.e. RAM, whose pages are charged to the memory cgroup of the
#: process that writes them, so memory + written files stay within ``memory_mb`` together; on
#: docker ``--storage-opt size`` where the storage driver has quotas (overlay2 on xfs with
#: pquota, btrfs, zfs), else the container's writable layer on a loop-mounted filesystem of that
#: size (dockerdisk.py). The default disk cap can be changed with DEFAULT_DISK_ENV.
DEFAULT_MEMORY_MB = 4096
DEFAULT_PIDS = 4096
DEFAULT_DISK_MB = 4096
DEFAULT_DISK_ENV = "AGENTMETER_DEFAULT_STORAGE_MB"


def default_disk_mb() -> int:
    """The disk cap of a task that sets no ``storage_mb``: ``$AGENTMETER_DEFAULT_STORAGE_MB``
    (MiB, a positive integer) or DEFAULT_DISK_MB."""
    raw = os.environ.get(DEFAULT_DISK_ENV, "").strip()
    if not raw:
        return DEFAULT_DISK_MB
    if not raw.isdigit() or int(raw) <= 0:
        raise ValueError(f"{DEFAULT_DISK_ENV}={raw!r}: expected a positive number of MiB")
    return int(raw)


def task_limits(memory_mb: int | None, cpus: float | None, disk_mb: int | None) -> Limits:
    """A task's limits with the defaults above where it sets none (CPU: unlimited)."""
    return Limits(memory_mb=memory_mb or DEFAULT_MEMORY_MB, pids=DEFAULT_PIDS, cpus=cpus,
                  disk_mb=disk_mb or default_disk_mb())


class Mount(_Frozen):
    """A host path bound into the sandbox."""

    source: Path
    target: str
    read_only: bool = True


class ExposedSocket(_Frozen):
    """A host Unix socket reachable inside the sandbox as 127.0.0.1:port (TCP)."""

    host_path: Path
    port: int = Field(gt=0, lt=65536)


class LayerSpec(_Frozen):
    """One cached layer: a shell script or a Dockerfile (supported subset) run on top of the
    layers below it. ``context`` is the directory COPY/ADD read from."""

    kind: Literal["script", "dockerfile"]
    source: str = Field(description="the script or Dockerfile text")
    origin: str = Field(default="<inline>", description="file the recipe came from, for errors")
    context: Path | None = None
    network: LayerNetwork = "full"
    label: str = ""
    #: built on the bare base instead of on the layers listed before it, and stacked on top of
    #: them: one build serves every task environment (agent installations). Package-manager
    #: state it changed is dropped so the environment's own shows through.
    independent: bool = False
    #: time allowed to build this layer, all its steps together (the task's
    #: ``build_timeout_sec``); ``None``: only the per-step cap. Not part of the cache key.
    build_timeout_s: float | None = Field(default=None, gt=0)

    def recipe_digest(self) -> str:
        """Digest of the recipe itself plus every file in its build context."""
        h = hashlib.sha256()
        h.update(self.kind.encode())
        h.update(b"\0")
        h.update(self.source.encode())
        h.update(b"\0")
        h.update(self.network.encode())
        if self.context is not None and self.context.is_dir():
            for p in droppings.walk(self.context):  # host bytecode caches are not content
                rel = p.relative_to(self.context).as_posix()
                h.update(rel.encode() + b"\0")
                if p.is_file() and not p.is_symlink():
                    h.update(p.read_bytes())
                    h.update(oct(p.stat().st_mode & 0o777).encode())
                elif p.is_symlink():
                    h.update(str(p.readlink()).encode())
        return h.hexdigest()


#: what a task adds so that its image can be built instead of pulled (for messages)
RECIPE_HINT = ("the Dockerfile the image is built from (environment/Dockerfile in a Harbor task, "
               "'build:' in a Terminal-Bench docker-compose.yaml)")


class BaseImage(_Frozen):
    """An OCI image a sandbox starts from instead of agentmeter's Debian base: a task's prebuilt
    environment (Harbor's ``environment.docker_image``, a Terminal-Bench compose ``image:``).

    Both backends use the image (the docker daemon's copy, else pulled; on the local backend
    the tree sandbox/oci.py unpacked) and build ``recipe`` only when the image cannot be had."""

    ref: str = Field(min_length=1, description="e.g. 'ubuntu:24.04', '127.0.0.1:5000/env:1'")
    origin: str = Field(default="<inline>", description="file and key that named it, for errors")
    recipe: LayerSpec | None = Field(
        default=None, description="the Dockerfile (or setup script) the image is the prebuilt "
                                  "form of; the first layer when the image itself is not used")


class SandboxSpec(_Frozen):
    """Everything needed to start a sandbox."""

    base: BaseName = "debian"
    #: start from this image (then the ``debian`` base is only the recipe's base)
    image: BaseImage | None = None
    layers: tuple[LayerSpec, ...] = ()
    mounts: tuple[Mount, ...] = ()
    workdir: str | None = Field(default=None, description="default cwd; a layer's WORKDIR, else /workspace")
    env: dict[str, str] = Field(default_factory=dict)
    user: str = Field(default="root", description="default exec user: 'root' or 'agent'")
    #: who the exec user 'agent' is: None, agentmeter's unprivileged account (AGENT_UID, home
    #: /home/agent); else a Docker ``USER`` value (name, uid, with ``:group`` or ``:gid``), or
    #: IMAGE_USER, resolved against the sandbox's /etc/passwd and /etc/group when it starts
    #: (sandbox/accounts.py). Root so named is the sandbox's root: unprivileged outside, as root
    #: is in every sandbox (docs/security.md).
    agent_user: str | None = None
    limits: Limits = Limits()
    network: NetworkPolicy = "none"
    #: network "allowlist": the hosts the proxy admits (forms: proxy.py HostPolicy)
    allowed_hosts: tuple[str, ...] = ()
    #: exact ``allowed_hosts`` entries may name the host's own or internal addresses (the run's
    #: ``--allow-host-network``; hostpolicy.py); without it no network reaches them
    allow_host_network: bool = False
    #: a trial's network extras (netsetup.py): with network, apt and pip go through the
    #: harness's proxy and its package cache; without, they fail at once instead of retrying
    net_extras: bool = False
    #: the network changes between phases (sandbox/netswitch.py: a shared verifier's own, as
    #: Harbor switches it): ``network`` is the widest any phase has ("full" when one is public,
    #: else "allowlist"), the harness's proxy runs whatever the phase, and the runner gives
    #: the sandbox its first phase's network before anything of the task runs
    network_switch: bool = False
    exposed_sockets: tuple[ExposedSocket, ...] = ()
    hostname: str = "sandbox"
    #: the id of a running sandbox of the same backend whose network namespace this one joins
    #: (a compose sidecar, runner/sidecars.py): it has that sandbox's network and no network
    #: of its own (``network`` must be "none")
    join_network: str | None = None

    @model_validator(mode="after")
    def _hosts_need_allowlist(self) -> SandboxSpec:
        if self.allowed_hosts and self.network != "allowlist":
            raise ValueError(f"allowed_hosts needs network 'allowlist', not {self.network!r}")
        return self

    @model_validator(mode="after")
    def _joined_has_no_network(self) -> SandboxSpec:
        if self.join_network is not None and (self.network != "none" or self.exposed_sockets):
            raise ValueError("a sandbox joining another's network has no network of its own")
        return self

    @model_validator(mode="after")
    def _image_replaces_debian(self) -> SandboxSpec:
        if self.image is not None and self.base != "debian":
            raise ValueError(f"a base image ({self.image.ref}) replaces the 'debian' base; "
                             f"it cannot be combined with base {self.base!r}")
        return self


class ExecResult(_Frozen):
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_s: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class FsEntry(NamedTuple):
    """One path of a snapshot. A tuple, not a model: a snapshot holds thousands and is never
    persisted (an FsDiff is)."""

    kind: Literal["f", "d", "l", "o"]  # file, directory, symlink, other
    size: int
    mtime_ns: int
    mode: int
    digest: str | None = None  # only for files whose mtime was too recent to trust


class FsSnapshot(_Frozen):
    root: str
    taken_ns: int
    #: keyed by path as ``os.fsdecode`` gives it (raw: undecodable bytes as surrogates)
    entries: dict[str, FsEntry]
    #: what the listing's caps left out (sandbox/fsnames.py), if anything
    note: str | None = None


class FsDiff(_Frozen):
    """Paths escaped (``fsnames.escape_path``): printable, valid text, reversible."""

    created: list[str] = Field(default_factory=list)
    modified: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    #: what the listings' caps left out (a cut listing can show spurious changes)
    notes: list[str] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.created or self.modified or self.deleted)


class SandboxError(Exception):
    """A sandbox could not be built, started or used. The message says what and where."""


class LayerBuildError(SandboxError):
    """A layer recipe failed; the message names the file, the line or command and its last output."""
