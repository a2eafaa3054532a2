"""The local backend: bubblewrap + overlayfs, close to process-spawn cost.

A sandbox is a *keeper* process that owns a private mount namespace and a private network
namespace (with ``network = "full"`` attached to the outside by pasta, see pasta.py) in which
the root filesystem is mounted as an overlay: base rootfs + cached read-only layers + a
per-sandbox upper dir. Each ``exec`` enters the keeper's mount and network namespaces with
``nsenter`` and starts ``bwrap`` on that root with fresh PID, IPC and UTS namespaces and the
seccomp filter of seccomp.py, so killing the exec kills every process it started, daemons
included. When the keeper's stdin closes (stop, or the owner died) the namespace and its mounts
vanish.

Users and privileges, run as root. Each sandbox has its own user namespace mapping ids 0..65535
onto host ids 2**30.. (``idmap.py``; no host account owns them). The keeper makes its mount and
network namespaces as host root (so nothing inside can change their mounts or interfaces), mounts
the overlay, then enters a fresh user namespace whose id map the harness writes. Every exec
enters the keeper's mount and network namespaces, then its user namespace as uid 0 (host uid
2**30) holding capabilities only there, cut to Docker's default set by bwrap; agent execs drop to
uid 1000 with ``setpriv`` (host 2**30 + 1000). Root in a sandbox is thus not host root: host-wide
sysctls, host root's keyrings and host-owned files (``base = "host"``, task mounts: shown as
nobody) refuse it. It cannot traverse ``/root``, so the keeper mounts the tree and binds the mount
sources under ``local_dirs.STAGE_DIR`` (in its mount namespace only) for bwrap. The cached base and
layers hold shifted owners, and their cache keys say so. User keyrings are per user namespace,
hence per sandbox; each exec also joins a fresh session keyring (``masks.py``). In every exec
``/proc/sys`` and the other proc paths Docker protects are read-only or masked (``masks.py``);
no sysfs is mounted.

Run as root, the keeper is a zygote (``zygote.py``): forked from one fork server per harness
process, it makes the namespaces, mounts and user namespace by system calls, and forks each
exec itself: the exec's init, PID 1 of a new PID namespace (``zygote_direct.py``), joins the cgroup,
a fresh session keyring and the sandbox's own mount namespace (in which the keeper prepared /dev
once, exactly as bwrap's ``--dev`` makes it), builds ahead what bwrap's arguments made (the
exec's mount namespace and root: the tree, that /dev, /proc with its masks, the task mounts;
pivot_root), enters the user namespace (the exec's IPC, UTS and cgroup namespaces made there),
and on the request sets what bwrap and setpriv set (ids, capabilities, no_new_privs, seccomp)
before it starts the command: no bwrap. bwrap is kept for the rootless backend, the chain of
programs and the copy-out's busybox commands (local_command.py builds both).

As an ordinary user, the keeper runs in a user namespace in which that user is uid 0; root execs
run as that uid 0, agent execs in a nested user namespace as uid 1000 without capabilities, and
limits that need cgroups are skipped with a warning.

The code by job: ``local_keeper.py`` (a sandbox's state, its tree and its keeper's start),
``local_command.py`` (an exec's bwrap command, or its request without bwrap), ``local_exec.py``
(the exec, its output and its kill), this module (start, stop, files, snapshots;
``LocalBackend``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import posixpath
import secrets
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

from agentmeter.notices import notice
from agentmeter.sandbox import accounts, cgroups, idmap, local_dirs, netswitch, rootfs, seccomp, zygote
from agentmeter.sandbox.bridge import start_bridge
from agentmeter.sandbox.fileops import WRITE_SCRIPT, SandboxFiles, copy_in_archive
from agentmeter.sandbox.fsdiff import diff_host_tree, snapshot_host_tree
from agentmeter.sandbox.hosttools import (
    KEYRING_TOOLS,
    LOCAL_TOOLS,
    ensure_tools,
    missing,
    static_busybox,
)
from agentmeter.sandbox.inroot import resolve_in_root
from agentmeter.sandbox.layers import LayerMeta, LocalLayerCache
from agentmeter.sandbox.local_command import BUSYBOX
from agentmeter.sandbox.local_exec import ExecSandbox
from agentmeter.sandbox.local_keeper import RUNNING
from agentmeter.sandbox.local_spares import Spares, spare_key
from agentmeter.sandbox.netsetup import fence_host, start_network
from agentmeter.sandbox.pasta import start_pasta
from agentmeter.sandbox.protocol import DEFAULT_IGNORE, OutputCallback
from agentmeter.sandbox.spec import (
    HARNESS_ENV,
    FsDiff,
    FsSnapshot,
    NetworkPolicy,
    SandboxError,
    SandboxSpec,
)


class LocalSandbox(ExecSandbox, SandboxFiles):
    """A running local sandbox (see module docstring)."""

    #: the gateway routes pasta had, while it is stopped (set_network: netswitch.py)
    _routes: list[tuple[str, str]] = []

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def merged(self) -> str:
        """The sandbox root as seen from the host (through the keeper's mount namespace)."""
        assert self._keeper is not None
        return f"/proc/{self._keeper.pid}/root{self._tree}"

    async def _start(self) -> None:
        try:
            self._cgroup = cgroups.create(self.id, self.spec.limits)
            # on a thread: the keeper's start does not stall the event loop (other sandboxes,
            # a spare starting beside a running trial: local_spares.py)
            started = asyncio.ensure_future(asyncio.to_thread(self._start_keeper))
            try:
                await asyncio.shield(started)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await started  # so that stop() below sees the keeper it must end
                raise
            if self.spec.network == "full":  # network (pasta.py), fenced off the host
                assert self._keeper is not None
                self._pasta = start_pasta(self._keeper.pid, self.dir, self._rootless)
                # after pasta (its --config-net replaces the namespace's rules), before any exec
                fence_host(self._keeper.pid, enter_userns=self._rootless)
            if self.spec.exposed_sockets:
                assert self._keeper is not None
                self._bridge = await start_bridge(self._keeper.pid, self.spec.exposed_sockets,
                                                  enter_userns=self._rootless)
            if not isinstance(self._keeper, zygote.Keeper):  # else made at the keeper's setup
                # the first exec also proves the sandbox works (bwrap, mounts, user switch)
                r = await self.exec(["mkdir", "-p", self.workdir], user="root", cwd="/")
                if r.exit_code != 0:
                    raise SandboxError(f"sandbox {self.id} failed to start: {r.stderr.strip()}")
            if self.spec.agent_user is not None:
                await self._resolve_account()
        except BaseException:
            await self.stop()
            raise

    async def _resolve_account(self) -> None:
        """The account the exec user 'agent' is (``SandboxSpec.agent_user``, accounts.py), read
        from the sandbox's files before anything of the agent runs; a root one runs as the
        sandbox's root (host uid 2**30, capabilities only in the sandbox's namespace)."""
        value = accounts.user_value(self.spec.agent_user, self._meta.user)
        acct = await accounts.resolve_in(value, lambda p: self.read_file(p, user="root"))
        if self._shifted and max(acct.uid, acct.gid, *acct.groups) >= idmap.SHIFT_SIZE:
            raise SandboxError(f"USER {value!r}: ids above {idmap.SHIFT_SIZE - 1} cannot be "
                               "mapped into a local sandbox")
        self.account = acct

    async def set_network(self, network: NetworkPolicy, allowed_hosts: tuple[str, ...] = ()) -> None:
        """Another phase's network (netswitch.py): the proxy's policy, and pasta stopped (the
        namespace left with its loopback only) or started again and the host fenced off."""
        netswitch.check(self.spec, network, allowed_hosts)
        assert self._keeper is not None
        self.network.switch(self.spec, network, allowed_hosts)
        pid = self._keeper.pid
        if network != "full" and self._pasta is not None:
            self._routes = await asyncio.to_thread(netswitch.gateway_routes, pid, self._rootless)
            pasta, self._pasta = self._pasta, None
            await asyncio.to_thread(pasta.stop)
            await netswitch.only_loopback(pid)
        elif network == "full" and self._pasta is None:
            self._pasta = await asyncio.to_thread(start_pasta, pid, self.dir, self._rootless)
            await netswitch.configured(pid)
            await asyncio.to_thread(fence_host, pid, enter_userns=self._rootless)
            await asyncio.to_thread(netswitch.restore_routes, pid, self._rootless, self._routes)

    async def stop(self, *, keep_upper: Path | None = None) -> None:
        """Stop everything and delete the sandbox's files; ``keep_upper`` (layer builds) moves
        the upper dir there first."""
        if self._stopped:
            return
        self._stopped = True
        RUNNING.pop(self.id, None)
        if self._bridge is not None:
            await self._bridge.stop()
        if self._pasta is not None:  # network (pasta.py)
            await asyncio.get_running_loop().run_in_executor(None, self._pasta.stop)
        await self.network.stop()
        keeper = self._keeper
        gone: zygote.Keeper | None = None
        if isinstance(keeper, zygote.Keeper):  # its execs are killed and reaped as it ends
            loop = asyncio.get_running_loop()
            keeper.detach()
            await loop.run_in_executor(None, keeper.end, 5)
            if keep_upper is not None:  # its mounts gone before the upper dir is a layer
                await loop.run_in_executor(None, keeper.wait, 5)
            else:  # the kernel's teardown of its namespaces, off the path (discard below)
                gone = keeper
            keeper = None
        if keeper is not None and keeper.poll() is None:
            if keeper.stdin:
                keeper.stdin.close()
            try:
                await asyncio.get_running_loop().run_in_executor(None, keeper.wait, 5)
            except subprocess.TimeoutExpired:
                keeper.kill()
                keeper.wait()
        if keeper is not None:
            for f in (keeper.stdout, keeper.stderr):
                if f:
                    f.close()
        if self._cgroup is not None:
            self._cgroup.remove_soon()  # its processes killed now, its directories later
        try:
            if keep_upper is not None:
                os.rename(self.upper, keep_upper)
        finally:
            # renamed away now, removed off the critical path once the keeper has exited
            local_dirs.discard(self.dir, after=None if gone is None else lambda: gone.wait(5))

    # -- files ---------------------------------------------------------------------------

    async def write_file(self, path: str, data: bytes | str, *, mode: int = 0o644,
                         user: str | None = None) -> None:
        raw = data.encode() if isinstance(data, str) else data
        # written as the user asked for, who thus owns it (no chown)
        r = await self.exec(["sh", "-c", WRITE_SCRIPT, "sh", self._abs(path), oct(mode)[2:]], stdin=raw,
                            user=user or "root", cwd="/", env=HARNESS_ENV)
        if r.exit_code != 0:
            raise SandboxError(f"write_file {path}: {r.stderr.strip()}")

    async def copy_in(self, host_src: Path, dst: str, *, user: str | None = None) -> None:
        user = user or "root"
        target = self._abs(dst)
        uid, gid = (0, 0) if user == "root" else (self.account.uid, self.account.gid)
        data = await asyncio.to_thread(copy_in_archive, host_src, posixpath.basename(target),
                                       uid=uid, gid=gid, top=False)
        into = target if host_src.is_dir() else posixpath.dirname(target)
        opts = "--no-same-owner" if user != "root" else "--same-owner --numeric-owner"
        script = f'mkdir -p -- "$1" && tar -x {opts} -C "$1"'
        r = await self.exec(["sh", "-c", script, "sh", into], stdin=data, user=user, cwd="/",
                            env=HARNESS_ENV)
        if r.exit_code != 0:
            raise SandboxError(f"copy_in {host_src} -> {dst}: {r.stderr.strip()}")

    async def _busybox(self, args: list[str], user: str,
                       sink: OutputCallback) -> tuple[int, str]:
        """``busybox ARGS`` as ``user``, its stdout into ``sink``; a sink that raises (its cap
        crossed) ends the exec, which kills it."""
        await asyncio.to_thread(static_busybox)  # installed on first need
        r = await self._run([BUSYBOX, *args], user=user, cwd="/", output_limit=8192,
                            on_stdout=sink, busybox=True)
        return r.exit_code, r.stderr

    # -- snapshots -----------------------------------------------------------------------

    def _host_view(self, root: str) -> str:
        # the image's links resolved as inside, below merged: never onto the host's tree
        top = resolve_in_root(self.merged, root)
        st = os.lstat(top)
        if not stat.S_ISDIR(st.st_mode):
            raise SandboxError(f"snapshot root {root} is not a directory inside the sandbox")
        return top

    async def snapshot(self, root: str | None = None,
                       ignore: Sequence[str] = DEFAULT_IGNORE) -> FsSnapshot:
        root = root or self.workdir
        return snapshot_host_tree(self._host_view(root), root, ignore)

    async def diff(self, snapshot: FsSnapshot, ignore: Sequence[str] = DEFAULT_IGNORE) -> FsDiff:
        return diff_host_tree(self._host_view(snapshot.root), snapshot, ignore)


class LocalBackend:
    """Makes :class:`LocalSandbox` instances."""

    name = "local"

    def __init__(self, *, progress: rootfs.Progress | None = None, spares: int = 0) -> None:
        """``spares``: keep up to that many sandboxes started ahead for specs that start again
        (local_spares.py); ``close`` stops them."""
        ensure_tools(LOCAL_TOOLS, "local sandboxes")
        self.rootless = os.geteuid() != 0
        if not seccomp.supported():
            notice(f"no seccomp filter for {platform.machine()} (only x86_64 "
                   "and aarch64): sandboxed processes may use every syscall")
        self.keyring = True
        if not self.rootless:
            idmap.check_range_free()
            ensure_tools(KEYRING_TOOLS, "per-exec session keyrings")
            os.makedirs(f"{local_dirs.STAGE_DIR}/root", mode=0o755, exist_ok=True)
            os.makedirs(local_dirs.DEV_DIR, mode=0o755, exist_ok=True)
        elif missing(KEYRING_TOOLS):
            self.keyring = False
            notice("keyctl (keyutils) not found: sandbox processes share your "
                   "session keyring; install keyutils to give each its own")
        self.progress = progress
        self.layers = LocalLayerCache(self)
        self.spares = Spares(self.start_raw, spares) if spares > 0 else None
        if self.rootless:
            notice("running as an ordinary user: sandboxes use a user "
                   "namespace (agent processes are uid 1000 inside, your uid outside), and "
                   "cgroup limits may be unavailable")

    def base_lower(self, base: str) -> str:
        if base == "host":
            return str(rootfs.host_skeleton())
        return str(rootfs.ensure_debian_base(self.progress))

    async def prepare(self, spec: SandboxSpec) -> None:
        await self.layers.resolve(spec)

    async def start(self, spec: SandboxSpec) -> LocalSandbox:
        lowers, meta = await self.layers.resolve(spec)
        spec, network = await start_network(spec)  # the proxy, if any (netsetup.py)
        key = spare_key(spec, lowers, meta) if self.spares is not None else None
        try:
            sb = await self.spares.take(key) if self.spares and key else None
            if sb is None:
                sb = await self.start_raw(spec, lowers, meta)
        except BaseException:
            await network.stop()
            raise
        sb.network = network
        if self.spares and key:
            self.spares.started(key, spec, lowers, meta)
        return sb

    async def close(self) -> None:
        """Stop the spares (local_spares.py), if any; wait until stopped sandboxes' files are
        removed (local_dirs.discard)."""
        if self.spares is not None:
            await self.spares.close()
        await asyncio.to_thread(local_dirs.drain)

    async def start_raw(self, spec: SandboxSpec, lowers: list[str], meta: LayerMeta) -> LocalSandbox:
        for m in spec.mounts:
            if not m.source.exists():
                raise SandboxError(f"mount source {m.source} (for {m.target}) does not exist")
        for sock in spec.exposed_sockets:
            if not sock.host_path.exists():
                raise SandboxError(f"exposed socket {sock.host_path} does not exist")
        sid = secrets.token_hex(6)
        # the owner's pid is in the name, so a runner killed before owner.json exists
        # still leaves a directory the next cleanup can attribute and remove
        directory = local_dirs.sandboxes_dir() / f"{os.getpid()}-{sid}"
        directory.parent.mkdir(parents=True, exist_ok=True)
        sb = LocalSandbox(spec, sid, directory, lowers, meta, self.rootless, self.layers.dir,
                          keyring=self.keyring)
        await sb._start()
        return sb

    async def cleanup_stale(self) -> int:
        return local_dirs.remove_stale()
