"""A docker sandbox: a running container (DockerBackend starts it, docker.py), and the users its
commands run as.

Every command is a ``docker exec``. Each exec carries a random marker in its environment, which
its children inherit (daemonized ones too), so on timeout or cancellation every process holding
the marker is stopped and killed (dockerkill.py), while other execs of the same sandbox keep
running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from agentmeter.sandbox import accounts, copyout, dockeruserns, fsnames, netswitch
from agentmeter.sandbox.bridge import BridgeProcess
from agentmeter.sandbox.dockercli import docker
from agentmeter.sandbox.dockerkill import KILL_MARKED, kill_marked_on_host
from agentmeter.sandbox.fileops import WRITE_SCRIPT, SandboxFiles, copy_in_archive
from agentmeter.sandbox.fsdiff import (
    diff_entries,
    find_listing_cmd,
    parse_find_listing,
    racy_files,
    snapshot_from_listing,
)
from agentmeter.sandbox.netsetup import SandboxNetwork
from agentmeter.sandbox.output import CappedBuffer, collect_output, wait_drained
from agentmeter.sandbox.protocol import DEFAULT_IGNORE, OutputCallback
from agentmeter.sandbox.spec import (
    AGENT_GID,
    AGENT_UID,
    AGENT_USER,
    DEFAULT_OUTPUT_LIMIT,
    HARNESS_ENV_ARGS,
    ExecResult,
    FsDiff,
    FsSnapshot,
    NetworkPolicy,
    SandboxError,
    SandboxSpec,
)

MARKER_VAR = "AGENTMETER_EXEC"
#: the host's static busybox, bind-mounted read-only in every container (copyout.py)
BUSYBOX = copyout.BUSYBOX
#: the spellings of root and of the agent account in an exec's ``user``
_ROOT_USERS = {"", "root", "0", "0:0", "root:root"}
_AGENT_USERS = {AGENT_USER, str(AGENT_UID), f"{AGENT_UID}:{AGENT_GID}",
                f"{AGENT_USER}:{AGENT_USER}"}


def docker_user(user: str) -> str:
    """'root' / 'agent' (or a raw docker -u value) as a docker -u value."""
    if user in _ROOT_USERS:
        return "0:0"
    if user in _AGENT_USERS:
        return f"{AGENT_UID}:{AGENT_GID}"
    return user


def sandbox_user(image_user: str) -> str:
    if image_user in _ROOT_USERS:
        return "root"
    return AGENT_USER if image_user in _AGENT_USERS else image_user


class DockerSandbox(SandboxFiles):
    """A running container. Paths given relative are relative to ``workdir``."""

    def __init__(self, name: str, spec: SandboxSpec, workdir: str, user: str,
                 container_id: str) -> None:
        self.id = name
        self.container_id = container_id
        self.spec = spec
        self._workdir = workdir
        self.user = user
        self.bridge: BridgeProcess | None = None
        self.network = SandboxNetwork()  # the proxy, if any (netsetup.py)
        self._stopped = False
        self._init_pid: int | None = None
        #: the interfaces set_network took down, and their gateway routes (netswitch.py)
        self._down: list[str] = []
        self._routes: list[tuple[str, str]] = []
        #: who the exec user 'agent' is (resolved at start: accounts.py)
        self.account = accounts.SANDBOX_ACCOUNT

    @property
    def workdir(self) -> str:
        return self._workdir

    def _user(self, user: str) -> str:
        """``user`` as a docker -u value: 'agent' is the sandbox's agent account."""
        if user in _AGENT_USERS:
            return f"{self.account.uid}:{self.account.gid}"
        return docker_user(user)

    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        on_stdout: OutputCallback | None = None,
    ) -> ExecResult:
        marker = f"{MARKER_VAR}={uuid.uuid4().hex}"
        run_as = self._user(user or self.user)
        args = ["exec", "-u", run_as, "-w", self._abs(cwd or "."), "-e", marker]
        name = {"0:0": "root", f"{self.account.uid}:{self.account.gid}": self.account.name,
                f"{AGENT_UID}:{AGENT_GID}": AGENT_USER}.get(run_as)
        if name:
            args += ["-e", f"USER={name}", "-e", f"LOGNAME={name}"]
        if stdin is not None:
            args.append("-i")
        for k, v in (env or {}).items():
            args += ["-e", f"{k}={v}"]
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "docker", *args, self.id, *argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = CappedBuffer(output_limit), CappedBuffer(output_limit)
        work = asyncio.ensure_future(collect_output(proc, stdin, out, err, on_stdout))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(work), timeout)
        except TimeoutError:
            timed_out = True
            await self._kill_marked(marker, run_as, proc)
            try:
                await asyncio.wait_for(asyncio.shield(work), 10)
            except TimeoutError:
                work.cancel()
        except asyncio.CancelledError:
            await asyncio.shield(self._kill_marked(marker, run_as, proc))
            raise
        code = proc.returncode if proc.returncode is not None else -9
        return ExecResult(exit_code=code,
                          stdout=out.text(), stderr=err.text(), timed_out=timed_out,
                          duration_s=time.monotonic() - t0, stdout_truncated=out.truncated,
                          stderr_truncated=err.truncated)

    async def _kill_marked(self, marker: str, run_as: str,
                           proc: asyncio.subprocess.Process) -> None:
        # As root on the daemon's host the sweep runs from outside (no fork inside, no docker
        # call). Otherwise, or when that found nothing, inside: /proc/PID/environ is readable
        # only by the same uid there (no CAP_SYS_PTRACE), so as the exec's user and as root.
        killed = 0
        if os.geteuid() == 0 and len(self.container_id) == 64:
            killed = await asyncio.to_thread(kill_marked_on_host, marker.encode(),
                                             self.container_id)
        if not killed:
            for u in dict.fromkeys((run_as, "0:0")):
                await docker("exec", "-u", u, *HARNESS_ENV_ARGS, self.id, "bash", "-c", KILL_MARKED,
                             "kill", marker, check=False)
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    async def init_pid(self) -> int:
        """The host pid of the container's init (asked once: it lives as long as the container)."""
        if self._init_pid is None:
            self._init_pid = int((await docker("inspect", "-f", "{{.State.Pid}}",
                                               self.id)).stdout)
        return self._init_pid

    async def set_network(self, network: NetworkPolicy, allowed_hosts: tuple[str, ...] = ()) -> None:
        """Another phase's network (netswitch.py): the proxy's policy, and the container's
        interfaces on docker's bridge taken down from the host (no route, no packet in or out
        but its loopback) or up again with their gateway routes (the host's fence is the
        namespace's and stays). ``docker network disconnect`` would do, but ``connect`` cannot
        add the gateway route again once the fence prohibits the gateway (docker0, the host's)."""
        netswitch.check(self.spec, network, allowed_hosts)
        self.network.switch(self.spec, network, allowed_hosts)
        if self.spec.network != "full":
            return
        if os.geteuid() != 0:  # as for the fence (docker.py: _fence)
            raise SandboxError("docker: not root, so a container's network cannot be switched "
                               "between phases")
        pid = await self.init_pid()
        if network != "full" and not self._down:
            self._routes = await asyncio.to_thread(netswitch.gateway_routes, pid, False)
            self._down = await asyncio.to_thread(netswitch.links_down, pid)
        elif network == "full" and self._down:
            await asyncio.to_thread(netswitch.links_up, pid, self._down)
            self._down = []
            await asyncio.to_thread(netswitch.restore_routes, pid, False, self._routes)

    async def kill_user_processes(self, user: str) -> int:
        """Kill every process of ``user`` from the host: the container is frozen first (cgroup
        freezer), so nothing forks meanwhile, not even a fork bomb that has used up the pids
        limit (an exec inside could not start then); SIGKILL takes effect on thaw."""
        uid = self._user(user).partition(":")[0]
        if uid == "0" and user not in _AGENT_USERS:
            raise SandboxError("kill_user_processes: not for root (it would end the sandbox)")
        # a root agent (the image's USER, accounts.py): every process but the container's init.
        # After a frozen round nothing of the agent runs again, so later rounds look only at
        # its survivors (init's own sleep, restarted on thaw, is new).
        init = await self.init_pid()
        root = uid == "0"
        # docker top shows host uids: shifted under a remapped daemon (dockeruserns.py)
        if uid.isdigit():
            uid = str(dockeruserns.host_uid(init, int(uid)))
        survivors: set[int] | None = None
        found = 0
        for _ in range(50):
            # A freeze can fail while a fork bomb races it ("unable to freeze"): then this
            # round's sweep runs unfrozen, and the next round tries to freeze again.
            frozen = (await docker("pause", self.id, check=False)).returncode == 0
            try:
                top = await docker("top", self.id, "-eo", "pid,uid,stat")
                pids = [int(f[0]) for f in (ln.split() for ln in top.stdout.decode().splitlines()[1:])
                        if len(f) >= 3 and f[1] == uid and not f[2].startswith("Z")
                        and int(f[0]) != init
                        and (survivors is None or int(f[0]) in survivors)]
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            finally:
                await docker("unpause", self.id, check=frozen)
            if not pids:
                return found
            found = found or len(pids)
            survivors = set(pids) if frozen and root else None
            await asyncio.sleep(0.05)
        raise SandboxError(f"processes of uid {uid} in {self.id} survive SIGKILL")

    async def write_file(self, path: str, data: bytes | str, *, mode: int = 0o644,
                         user: str | None = None) -> None:
        payload = data.encode() if isinstance(data, str) else data
        owner = self._user(user or "root")
        res = await docker("exec", "-i", "-u", "0:0", *HARNESS_ENV_ARGS, self.id, "bash", "-c",
                           WRITE_SCRIPT, "write",
                           self._abs(path), format(mode, "o"), owner, stdin=payload, check=False)
        if res.returncode != 0:
            raise SandboxError(f"write_file {path} in {self.id}: {res.text()}")

    async def copy_in(self, host_src: Path, dst: str, *, user: str | None = None) -> None:
        target = self._abs(dst)
        owner = self._user(user or "root")
        uid, _, gid = owner.partition(":")
        if not (uid.isdigit() and gid.isdigit()):
            raise SandboxError(f"copy_in needs a numeric or root/agent user, not {owner!r}")
        data = await asyncio.to_thread(copy_in_archive, host_src, posixpath.basename(target),
                                       uid=int(uid), gid=int(gid), top=True)
        res = await docker("exec", "-i", "-u", "0:0", *HARNESS_ENV_ARGS, self.id, "bash", "-c",
                           'mkdir -p -- "$1" && exec tar -x --same-owner --numeric-owner -C "$1"',
                           "copy_in", posixpath.dirname(target), stdin=data, check=False)
        if res.returncode != 0:
            raise SandboxError(f"copy_in {host_src} -> {dst} in {self.id}: {res.text()}")

    async def _busybox(self, args: list[str], user: str,
                       sink: OutputCallback) -> tuple[int, str]:
        """``busybox ARGS`` as ``user`` (by its absolute path: no shell, no PATH lookup), its
        stdout streamed into ``sink``; when the sink raises (its cap crossed) the ``docker
        exec`` is killed and the error raised."""
        proc = await asyncio.create_subprocess_exec(
            "docker", "exec", "-u", self._user(user), "-w", "/", self.id, BUSYBOX, *args,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        err = CappedBuffer(8192)
        try:
            await collect_output(proc, None, CappedBuffer(0), err, sink)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await wait_drained(proc)
            raise
        assert proc.returncode is not None
        return proc.returncode, err.text()

    async def snapshot(self, root: str | None = None,
                       ignore: Sequence[str] = DEFAULT_IGNORE) -> FsSnapshot:
        top = self._abs(root or ".")
        taken = time.time_ns()
        budget = fsnames.Budget()
        entries = parse_find_listing(await self._listing(top, budget.caps), ignore, budget)
        digests = await self._digests(top, list(racy_files(entries, taken)))
        return snapshot_from_listing(top, taken, entries, digests, budget.note)

    async def diff(self, snapshot: FsSnapshot, ignore: Sequence[str] = DEFAULT_IGNORE) -> FsDiff:
        budget = fsnames.Budget()
        now = parse_find_listing(await self._listing(snapshot.root, budget.caps), ignore, budget)
        suspects = [rel for rel, e in snapshot.entries.items()
                    if e.digest is not None and rel in now and now[rel].kind == "f"
                    and now[rel].size == e.size and now[rel].mtime_ns == e.mtime_ns]
        digests = await self._digests(snapshot.root, suspects)
        return diff_entries(snapshot, now, digests.get, ignore, budget.note)

    async def _listing(self, top: str, caps: fsnames.Caps) -> bytes:
        res = await docker("exec", "-u", "0:0", *HARNESS_ENV_ARGS, "-w", top, self.id, "bash",
                           "-c", find_listing_cmd(caps), check=False)
        if res.returncode != 0 and not res.stdout:
            raise SandboxError(f"listing {top} in {self.id}: {res.text()}")
        return res.stdout

    async def _digests(self, top: str, rels: list[str]) -> dict[str, str]:
        if not rels:
            return {}
        res = await docker("exec", "-i", "-u", "0:0", *HARNESS_ENV_ARGS, "-w", top, self.id,
                           "bash", "-c", "xargs -0 -r sha256sum -z -- 2>/dev/null; true",
                           stdin=b"\0".join(r.encode("utf-8", "surrogateescape") for r in rels))
        out: dict[str, str] = {}
        for rec in res.stdout.split(b"\0"):
            digest, sep, name = rec.partition(b"  ")
            if sep:
                out[name.decode("utf-8", "surrogateescape")] = digest.decode()
        return out

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.bridge is not None:
            await self.bridge.stop()
            self.bridge = None
        await docker("rm", "-f", "-v", self.id, check=False)
        await self.network.stop()
