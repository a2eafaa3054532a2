"""The ``docker`` sandbox backend: one container per sandbox on cached images (see dockerimage.py).

A sandbox is a container whose pid 1 is a tiny bash loop that only reaps orphans; every command
is a ``docker exec`` (the running container: dockersandbox.py).
The image is agentmeter's Debian base, or the task's own prebuilt image (images.py), plus the
task's and the agent's layers.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import uuid
from pathlib import Path

from agentmeter.notices import notice
from agentmeter.paths import cache_dir
from agentmeter.sandbox import accounts, dockerdisk, images, seccomp
from agentmeter.sandbox.bridge import start_bridge
from agentmeter.sandbox.dockerbridge import bridge_lost, bridge_refusal
from agentmeter.sandbox.dockerbuild import build_layer
from agentmeter.sandbox.dockercli import LABEL, OWNER_LABEL, DockerOutput, docker, owner_alive, owner_label
from agentmeter.sandbox.dockerfile import parse_dockerfile
from agentmeter.sandbox.dockerimage import (
    ImageConfig,
    chain_digest,
    ensure_base_image,
    image_config,
    image_exists,
    layer_tag,
)
from agentmeter.sandbox.dockersandbox import BUSYBOX, DockerSandbox, sandbox_user
from agentmeter.sandbox.hosttools import static_busybox
from agentmeter.sandbox.netsetup import fence_host, start_network
from agentmeter.sandbox.spec import LayerBuildError, LayerSpec, SandboxError, SandboxSpec

#: pid 1 of every sandbox: sleeps, and reaps orphans (bash waits for any child). It has no
#: signal handler, so nothing inside, not even a root agent, can signal it (the kernel drops
#: signals to a PID namespace's init that it does not handle); ``docker rm -f`` kills it.
PID1 = ["bash", "-c", 'trap "" TERM INT HUP; while :; do sleep 86400 & wait $!; done']


def _seccomp_profile() -> Path:
    """The profile file (written once per content: its name is its digest)."""
    text = json.dumps(seccomp.docker_profile(), sort_keys=True)
    path = cache_dir() / "docker" / f"seccomp-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


class DockerBackend:
    """Makes docker sandboxes. Needs a daemon that answers (see dockerd.ensure_dockerd)."""

    name = "docker"

    def __init__(self) -> None:
        self._prepared: dict[str, ImageConfig] = {}
        self._roots = images.RootCache()
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}  # a Lock serves one loop
        #: how disk_mb is enforced: "quota" (--storage-opt size), "loop" (dockerdisk.py),
        #: "none" (AGENTMETER_DOCKER_DISK=unenforced); None until the first container tells
        self._disk_mode: str | None = None
        self._storage: dockerdisk.DaemonStorage | None = None

    def _labels(self) -> list[str]:
        return ["--label", f"{LABEL}=1", "--label", f"{OWNER_LABEL}={owner_label()}"]

    async def prepare(self, spec: SandboxSpec) -> None:
        await self._image_for(spec)

    def _lock(self) -> asyncio.Lock:
        return self._locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())

    async def _image_for(self, spec: SandboxSpec) -> ImageConfig:
        """The image of ``spec``: its root (the task's image, the environment Dockerfile's FROM
        image, else the Debian base), the environment's layers, the adapt layer (the sandbox
        account and directories, images.py), then the agent installs."""
        if spec.base != "debian":
            raise SandboxError(f"the docker backend has no {spec.base!r} base (only 'debian')")
        root = await self._roots.root(spec.image, self._labels(), self._lock())
        layers = (*root.layers, *spec.layers)
        env = [layer for layer in layers if not layer.independent]
        installs = [layer for layer in layers if layer.independent]
        real_from = False
        stand_in: str | None = None  # the FROM image the Debian base stands in for, and why
        if root.tag is None and env and env[0].kind == "dockerfile":
            parsed = parse_dockerfile(env[0].source, env[0].origin)
            found = await self._roots.from_root(
                parsed.from_image, f"{env[0].origin}:{parsed.from_line}", self._lock())
            if found is not None:
                root, real_from = found, True
            else:
                stand_in = self._roots.stand_in_for(parsed.from_image)
        digest = root.digest
        for layer in env:
            digest = chain_digest(digest, layer)
        adapt = images.adapt_digest(digest)
        digest = adapt
        for layer in installs:
            digest = chain_digest(digest, layer)
        if digest in self._prepared:
            return self._prepared[digest]
        async with self._lock():
            parent = root.tag or await ensure_base_image()
            digest = root.digest
            for i, layer in enumerate(env):
                digest = chain_digest(digest, layer)
                try:
                    parent = await self._layer(layer, parent, digest, root, real_from and i == 0)
                except LayerBuildError as e:  # on a stand-in: the image that could not be had
                    why = await self._copy_from_stand_in(layer, str(e)) or stand_in
                    if why is None:
                        raise
                    raise LayerBuildError(f"{why}, so this step ran on agentmeter's Debian "
                                          f"stand-in for it and failed: {e}") from None
            where = (f"{root.image.origin}: image {root.image.ref!r}" if root.foreign and root.image
                     else "agentmeter's Debian base")
            parent = await images.ensure_adapted(parent, adapt, where, self._labels())
            digest = adapt
            for layer in installs:
                digest = chain_digest(digest, layer)
                parent = await self._layer(layer, parent, digest, root, False)
            cfg = self._prepared[digest] = await image_config(parent)
        return cfg

    async def _copy_from_stand_in(self, layer: LayerSpec, error: str) -> str | None:
        """``IMAGE: why`` when the Dockerfile step that failed (``error``) is a ``COPY --from``
        an image that could not be had (the classic build copies from the Debian base in its
        place: dockerfile_legacy.py names it ``agentmeter-image-N``), else None."""
        m = re.search(r"^[^\n]*?: COPY --from=agentmeter-image-(\d+) ", error)
        if layer.kind != "dockerfile" or m is None:
            return None
        parsed = parse_dockerfile(layer.source, layer.origin)
        refs: list[str] = []
        for stage in parsed.all_stages():
            refs += [st.from_image for st in stage.steps
                     if st.from_image is not None and st.from_image not in refs]
        if int(m.group(1)) >= len(refs):
            return None
        ref = refs[int(m.group(1))]
        found = await images.from_root(ref, layer.origin)
        return f"{ref}: {found}" if isinstance(found, str) else None

    async def _layer(self, layer: LayerSpec, parent: str, digest: str, root: images.Root,
                     real_from: bool) -> str:
        tag = layer_tag(digest)
        if not await image_exists(tag):
            try:
                await build_layer(layer, parent, tag, self._labels(), real_from=real_from)
            except LayerBuildError as e:
                if root.foreign and layer.independent:
                    raise images.foreign_install_error(root, layer, e) from e
                raise
        return tag

    async def start(self, spec: SandboxSpec) -> DockerSandbox:
        image = await self._image_for(spec)
        spec, network = await start_network(spec)  # the proxy, if any (netsetup.py)
        try:
            box = await self._start(spec, image)
        except BaseException:
            await network.stop()
            raise
        box.network = network
        return box

    async def _start(self, spec: SandboxSpec, image: ImageConfig) -> DockerSandbox:
        name = f"agentmeter-{uuid.uuid4().hex[:12]}"
        workdir = spec.workdir or image.workdir or "/workspace"
        user = spec.user if "user" in spec.model_fields_set else sandbox_user(image.user)
        # no-new-privileges: no setuid binary (sudo, su) lifts the agent to root; the seccomp
        # profile is the local backend's rules (Docker < 25's default still allows io_uring):
        # tests/test_hostile_leftovers.py, tests/test_hostile_battery.py. No log: the init's
        # stdout, which the container's root can open, went to a json log on the host's disk
        # past the disk cap (tests/test_hostile_docker_disk.py)
        args = ["--name", name, *self._labels(), "--hostname", spec.hostname,
                "--log-driver", "none",
                "--security-opt", "no-new-privileges",
                "--security-opt", f"seccomp={_seccomp_profile()}",
                "--network", "bridge" if spec.network == "full" else "none",
                "-u", "0:0", "-w", workdir, "--entrypoint", ""]
        if spec.join_network is not None:  # a compose sidecar: the main container's network
            args[args.index("--network") + 1] = f"container:{spec.join_network}"
            del args[args.index("--hostname"):args.index("--hostname") + 2]
        for k, v in spec.env.items():
            args += ["-e", f"{k}={v}"]
        busybox = await asyncio.to_thread(static_busybox)  # installed on first need
        if "," in busybox:
            raise SandboxError(f"the host's busybox path may not contain ',': {busybox}")
        args += ["--mount", f"type=bind,source={busybox},target={BUSYBOX},readonly"]
        for m in spec.mounts:
            if "," in str(m.source) or "," in m.target:
                raise SandboxError(f"mount paths may not contain ',': {m.source} -> {m.target}")
            args += ["--mount", f"type=bind,source={m.source},target={m.target}"
                     + (",readonly" if m.read_only else "")]
        lim = spec.limits
        if lim.memory_mb:
            args += ["--memory", f"{lim.memory_mb}m", "--memory-swap", f"{lim.memory_mb}m"]
        if lim.pids:
            args += ["--pids-limit", str(lim.pids)]
        if lim.cpus:
            args += ["--cpus", str(lim.cpus)]
        args += [image.tag, *PID1]
        if spec.network == "full" and (refusal := bridge_refusal()):
            raise SandboxError(refusal)
        for attempt in (1, 2):
            res = await self._run(name, args, lim.disk_mb, bool(image.volumes))
            if res.returncode == 0:
                break
            await docker("rm", "-f", name, check=False)
            # the daemon's bridge lost under it: made again once (dockerbridge.py), else named
            lost = await bridge_lost(res.text()) if attempt == 1 else None
            if lost:
                raise SandboxError(lost)
            if lost is None:
                raise SandboxError(f"docker run failed: {res.text()[-2000:]}")
        box = DockerSandbox(name, spec, workdir, user, res.stdout.decode().strip())
        if spec.agent_user is not None:  # who 'agent' is (accounts.py), before the agent runs
            try:
                value = accounts.user_value(spec.agent_user, image.user)
                box.account = await accounts.resolve_in(
                    value, lambda p: box.read_file(p, user="root"))
            except BaseException:
                await box.stop()
                raise
        if spec.exposed_sockets or spec.network == "full":
            try:
                pid = await box.init_pid()
                if spec.network == "full":  # fenced off the host's addresses (netsetup.py)
                    await self._fence(pid)
                if spec.exposed_sockets:
                    box.bridge = await start_bridge(pid, spec.exposed_sockets)
            except BaseException:
                await box.stop()
                raise
        return box

    async def _run(self, name: str, args: list[str], disk_mb: int | None,
                   volumes: bool = False) -> DockerOutput:
        """``docker run -d ARGS``, its disk capped by the driver's quota or a loop disk."""
        res: DockerOutput | None = None
        if disk_mb and self._disk_mode in (None, "quota"):
            # the driver's own quota (overlay2 on xfs with pquota, btrfs, zfs)
            res = await docker("run", "-d", "--storage-opt", f"size={disk_mb}m", *args,
                               check=False)
            if res.returncode == 0:
                self._disk_mode = "quota"
            elif "storage-opt" in res.text():
                await docker("rm", "-f", name, check=False)
                self._disk_mode = await self._disk_fallback(disk_mb)
                res = None
        if res is None and disk_mb and self._disk_mode == "loop":
            assert self._storage is not None
            res = await _run_on_loop_disk(self._storage, name, args, disk_mb, volumes)
        elif res is None:
            res = await docker("run", "-d", *args, check=False)
        return res

    async def _disk_fallback(self, disk_mb: int) -> str:
        """The daemon's driver cannot cap a container's disk: the loop-mounted layer where it
        can be used, else (AGENTMETER_DOCKER_DISK=unenforced) no cap with a notice, else refused."""
        info = await docker("info", "--format", "{{.Driver}}\t{{.DockerRootDir}}")
        driver, _, root = info.stdout.decode().strip().partition("\t")
        self._storage = dockerdisk.DaemonStorage(driver, Path(root))
        why = self._storage.loop_unsupported()
        if why is None:
            return "loop"
        if dockerdisk.policy() == "unenforced":
            notice(f"docker: this storage driver cannot cap a container's disk (--storage-opt "
                   f"size) and {why}; disk_mb={disk_mb} is not enforced "
                   f"({dockerdisk.POLICY_ENV}=unenforced)")
            return "none"
        raise SandboxError(
            f"docker: cannot cap this container's disk (disk_mb={disk_mb}): the storage driver "
            f"has no quota (--storage-opt size) and {why}, so an agent could fill the host's "
            f"disk; set {dockerdisk.POLICY_ENV}=unenforced to run without the cap")

    async def _fence(self, pid: int) -> None:
        """``ip rule … prohibit`` for the host's addresses in the container's namespace: as
        root (then the daemon is this machine's); otherwise a notice says it is not fenced."""
        if os.geteuid() != 0:
            notice("docker: not root, so full-network containers are not fenced off this host's "
                   "addresses (a service the host binds on docker0 or 0.0.0.0 is reachable)")
            return
        await asyncio.to_thread(fence_host, pid)

    async def cleanup_stale(self) -> int:
        res = await docker("ps", "-a", "--filter", f"label={LABEL}=1", "--format",
                           f'{{{{.ID}}}} {{{{.Label "{OWNER_LABEL}"}}}}')
        rows = (ln.partition(" ") for ln in res.stdout.decode().splitlines())
        dead = [cid for cid, _, owner in rows if owner and not owner_alive(owner)]
        if dead:
            await docker("rm", "-f", "-v", *dead, check=False)  # also unmounts a loop disk
        await asyncio.to_thread(dockerdisk.remove_leftovers)
        return len(dead)


async def _run_on_loop_disk(storage: dockerdisk.DaemonStorage, name: str, args: list[str],
                            disk_mb: int, has_volumes: bool = False) -> DockerOutput:
    """``docker run -d ARGS`` with the container's writable layer on a loop-mounted filesystem
    of ``disk_mb`` MiB (dockerdisk.py): create, mount over its layer, start, check the daemon
    saw the mount. The filesystem is made while the daemon creates the container."""
    made = asyncio.ensure_future(asyncio.to_thread(dockerdisk.make_image, disk_mb))
    try:
        res = await docker("create", *args, check=False)
    finally:
        image = await made
    if res.returncode != 0:
        image.unlink(missing_ok=True)
        return res
    volumes: list[Path] = []  # the image's VOLUMEs: on the capped filesystem too
    try:
        layer = storage.layer_dir(res.stdout.decode().strip())
        await asyncio.to_thread(dockerdisk.mount_over, layer, image)
        if has_volumes:  # the image's VOLUMEs (an inspect only for an image that has some)
            mounts = json.loads((await docker("inspect", "-f", "{{json .Mounts}}", name)).stdout
                                or b"[]") or []
            volumes = [Path(m["Source"]) for m in mounts if m.get("Type") == "volume"]
            await asyncio.to_thread(dockerdisk.volumes_onto, layer, volumes)
        started = await docker("start", name, check=False)
        if started.returncode != 0:
            return started
        if not dockerdisk.daemon_sees(layer):
            raise SandboxError("docker disk cap: the daemon did not use the size-limited layer "
                               "(is it in another mount namespace?)")
    except BaseException:
        await asyncio.to_thread(dockerdisk.release_volumes, volumes)
        await docker("rm", "-f", "-v", name, check=False)  # unmounts everything under the layer
        raise
    finally:
        image.unlink(missing_ok=True)
    await asyncio.to_thread(dockerdisk.release_volumes, volumes)
    return res
