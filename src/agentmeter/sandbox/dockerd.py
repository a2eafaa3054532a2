"""Talking to the Docker daemon: start it when none answers, run the ``docker`` CLI, label
containers with their owner, build the images the docker backend runs (the imported Debian base
and one cached image per layer), and unpack ``docker cp`` archives safely.

agentmeter's own images are never pulled from a registry. The base is the debootstrap tree of
:func:`~agentmeter.sandbox.rootfs.ensure_debian_base` imported with ``docker import`` (a
Dockerfile's FROM is mapped onto it); each layer is an image on top of the previous one, tagged
by a digest of the whole chain, so a layer that was built once is found again by tag and never
rebuilt. A task's own prebuilt image, and a Dockerfile's FROM image, are used when the daemon
has them or can pull them (images.py); only when they cannot be had is the Debian base used.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentmeter.notices import notice
from agentmeter.paths import cache_dir
from agentmeter.sandbox import dockeruserns, droppings
from agentmeter.sandbox.dockerfile import ParsedDockerfile, parse_dockerfile
from agentmeter.sandbox.dockerfile_render import render_classic
from agentmeter.sandbox.hosttools import DOCKER_TOOLS, ensure_tools
from agentmeter.sandbox.idmap import unshifted
from agentmeter.sandbox.output import strip_ansi
from agentmeter.sandbox.rootfs import BASE_ID, ensure_debian_base
from agentmeter.sandbox.spec import LayerBuildError, LayerSpec, SandboxError
from agentmeter.sandbox.trust import BUILD_CA_ENV, BUILD_CA_PATH, host_ca_bundle

#: every container the backends create carries LABEL=1 and OWNER_LABEL=host:pid:starttime
LABEL = "agentmeter"
OWNER_LABEL = "agentmeter.owner"
BASE_REPO = "agentmeter-base"
LAYER_REPO = "agentmeter-layer"
#: the docker base: the local base with its ids shifted back (idmap.py), so a container's root
#: and agent own what they own on Docker (its processes are not in a shifted namespace)
DOCKER_BASE_ID = f"{BASE_ID}-ids0"
BASE_TAG = f"{BASE_REPO}:{DOCKER_BASE_ID}"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: how many output lines a LayerBuildError shows
ERROR_TAIL_LINES = 20
_BUILD_NOISE = re.compile(r"^\s*(DEPRECATED: The legacy builder|BuildKit is currently|"
                          r"environment-variable\.|---> |Removing intermediate)")


# --- the docker CLI ---------------------------------------------------------------------------

@dataclass(frozen=True)
class DockerOutput:
    returncode: int
    stdout: bytes
    stderr: bytes

    def text(self) -> str:
        return (self.stdout + self.stderr).decode("utf-8", "replace").strip()


async def docker(*args: str, stdin: bytes | None = None, check: bool = True,
                 env: dict[str, str] | None = None) -> DockerOutput:
    """Run ``docker ARGS`` and collect its output; ``check`` raises SandboxError on failure."""
    proc = await asyncio.create_subprocess_exec(
        "docker", *args,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=dict(os.environ, **env) if env else None)
    try:
        out, err = await proc.communicate(stdin)
    except asyncio.CancelledError:  # e.g. a build past its timeout: the daemon stops with us
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    res = DockerOutput(proc.returncode if proc.returncode is not None else -1, out, err)
    if check and res.returncode != 0:
        raise SandboxError(f"docker {' '.join(args[:2])} failed: {res.text()[-2000:]}")
    return res


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def owner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def owner_alive(label: str) -> bool:
    host, _, rest = label.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # not ours to judge
    return _start_time(int(pid)) == start


# --- the daemon -------------------------------------------------------------------------------

def daemon_answers(timeout: float = 10, host: str | None = None) -> bool:
    """Whether ``docker info`` answers (on ``host``, else the CLI's own choice)."""
    env = dict(os.environ, DOCKER_HOST=host) if host else None
    try:
        r = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                           capture_output=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


@dataclass
class DockerDaemon:
    """A daemon that answers; ``stop`` ends it only if this process started it."""

    started: bool
    log_path: Path | None = None
    flags: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: its ``DOCKER_HOST`` when it is agentmeter's own remapped daemon (dockeruserns.py)
    host: str | None = None

    def stop(self, timeout: float = 20) -> None:
        if not self.started or self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


#: dockerd flag sets tried in order: the defaults first, then without host networking setup
DOCKERD_FLAG_SETS: tuple[tuple[str, ...], ...] = ((), ("--iptables=false", "--bridge=none"))


def ensure_dockerd(wait_s: float = 60) -> DockerDaemon:
    """Return a daemon that answers ``docker info``, starting ``dockerd`` (root only) if needed.

    With ``AGENTMETER_DOCKER_USERNS=remap`` (dockeruserns.py) and no ``DOCKER_HOST`` of the
    user's: agentmeter's own remapped daemon when it answers, else the daemon that answers (a
    notice when it does not remap), else agentmeter's own remapped daemon, started; using it
    sets ``DOCKER_HOST`` in this process's environment (every ``docker`` call inherits it)."""
    mode = dockeruserns.policy()
    own = dockeruserns.own_daemon() if mode == "remap" and "DOCKER_HOST" not in os.environ \
        else None
    if own is not None and own.socket.exists() and daemon_answers(host=own.host):
        os.environ["DOCKER_HOST"] = own.host
        return _bridge_checked(DockerDaemon(started=False, host=own.host))
    if daemon_answers():
        dockeruserns.check_daemon()
        return _bridge_checked(DockerDaemon(started=False))
    if os.geteuid() != 0:
        raise SandboxError("no Docker daemon answers and starting dockerd needs root "
                           "(start it with: sudo dockerd &)")
    ensure_tools(DOCKER_TOOLS, "the docker sandbox backend")
    if own is not None:
        return _bridge_checked(start_own_daemon(own, wait_s))
    daemon = _start_dockerd(DOCKERD_FLAG_SETS, cache_dir() / "docker" / "dockerd.log", wait_s)
    dockeruserns.check_daemon()
    return _bridge_checked(daemon)


def _bridge_checked(daemon: DockerDaemon) -> DockerDaemon:
    """``daemon``, its bridge checked (repaired if lost): a bridge that cannot be used is said
    once here, and is the reason every sandbox with network is refused with."""
    problem = check_bridge()
    if problem is not None:
        notice(f"docker: {problem}")
    return daemon


# --- the daemon's bridge ----------------------------------------------------------------------
#
# A sandbox with network runs on the daemon's default ``bridge`` network. Two ways it can be
# unusable while ``docker info`` answers: the daemon was started with ``--bridge=none`` (the
# fallback of DOCKERD_FLAG_SETS: it has no ``bridge`` network at all), or the host interface of
# its bridge (docker0) was deleted under it (every container start then fails with ``could not
# find bridge docker0``). The second is repaired (the interface made again with its addresses:
# the daemon finds its bridge by name); both are otherwise named once, as the cause.

#: the daemon's bridge network is unusable: why (None = usable or not known yet)
_BRIDGE_UNUSABLE: str | None = None
#: where the host's network interfaces are listed
_INTERFACES = Path("/sys/class/net")
_LOST_BRIDGE = re.compile(r"could not find bridge ([\w.-]+)|network bridge not found")


@dataclass(frozen=True)
class BridgeState:
    """The daemon's default bridge network as ``docker network inspect bridge`` shows it."""

    exists: bool  # False: the daemon has no ``bridge`` network (``--bridge=none``)
    name: str = "docker0"  # its host interface
    addresses: tuple[str, ...] = ()  # gateway/prefix of each subnet


def parse_bridge_inspect(returncode: int, stdout: str) -> BridgeState:
    """The :class:`BridgeState` of ``docker network inspect bridge --format '{{json .}}'``."""
    if returncode != 0:
        return BridgeState(exists=False)
    info = json.loads(stdout or "{}") or {}
    name = (info.get("Options") or {}).get("com.docker.network.bridge.name") or "docker0"
    addrs = []
    for cfg in (info.get("IPAM") or {}).get("Config") or []:
        gateway, subnet = cfg.get("Gateway"), cfg.get("Subnet")
        if gateway and subnet and "/" in subnet:
            addrs.append(f"{gateway}/{subnet.rpartition('/')[2]}")
    return BridgeState(exists=True, name=name, addresses=tuple(addrs))


def bridge_problem(state: BridgeState) -> str | None:
    """Why containers with network cannot start on the daemon (one sentence naming the cause),
    or None when its bridge is there."""
    if not state.exists:
        return ("the Docker daemon has no 'bridge' network (it runs with --bridge=none, "
                "agentmeter's fallback when dockerd could not set up its bridge and iptables: see "
                f"{cache_dir() / 'docker' / 'dockerd.log'}), so no sandbox with network can start "
                "on it; restart dockerd with its default bridge")
    if not (_INTERFACES / state.name).exists():
        return (f"the Docker daemon's bridge {state.name} is gone from this host (deleted while "
                f"the daemon ran: every container with network fails with 'could not find bridge "
                f"{state.name}'); restart dockerd, or make the interface again")
    return None


#: where dockerd writes its pid by default
DEFAULT_PIDFILE = Path("/var/run/docker.pid")


def _local_daemon() -> bool:
    """Whether the daemon is one whose bridge this process may check and repair: the default
    daemon or agentmeter's own, running in this process's network namespace (not a daemon
    behind a TCP host, rootless, or the host's daemon seen from inside a container)."""
    host = os.environ.get("DOCKER_HOST", "")
    own = dockeruserns.own_daemon()
    if host and host != own.host:
        return False
    try:
        pid = int((own.pidfile if host else DEFAULT_PIDFILE).read_text().strip())
        return os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    except (OSError, ValueError):
        return False


def _inspect_bridge() -> BridgeState:
    r = subprocess.run(["docker", "network", "inspect", "bridge", "--format", "{{json .}}"],
                       capture_output=True, text=True, timeout=30)
    return parse_bridge_inspect(r.returncode, r.stdout)


def _make_bridge(state: BridgeState) -> None:
    """The bridge's host interface made again, with its gateway addresses, up."""
    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], capture_output=True, timeout=30, check=False)
    ip("link", "add", state.name, "type", "bridge")
    for addr in state.addresses:
        ip("addr", "add", addr, "dev", state.name)
    ip("link", "set", state.name, "up")


def check_bridge() -> str | None:
    """Check the daemon's bridge: a lost interface is made again (as root, on a local daemon);
    what cannot be repaired is kept as the reason every sandbox with network is then refused
    with (:func:`bridge_refusal`) and returned."""
    global _BRIDGE_UNUSABLE
    try:
        if not _local_daemon():
            return None
        state = _inspect_bridge()
        problem = bridge_problem(state)
        if problem is not None and state.exists and os.geteuid() == 0:
            if state.name == dockeruserns.BRIDGE:  # agentmeter's own daemon: with its rules
                dockeruserns.ensure_bridge()
            else:
                _make_bridge(state)
            problem = bridge_problem(state)
    except (OSError, subprocess.TimeoutExpired, ValueError, SandboxError) as e:
        problem = f"the Docker daemon's bridge could not be checked: {e}"
    _BRIDGE_UNUSABLE = problem
    return problem


def bridge_refusal() -> str | None:
    """Why sandboxes with network cannot start on the daemon, as found by :func:`check_bridge`."""
    return _BRIDGE_UNUSABLE


async def bridge_lost(output: str) -> str | None:
    """Whether a failed ``docker`` command failed because the daemon's bridge is unusable
    (``could not find bridge docker0``, ``network bridge not found``): then the bridge is
    checked and repaired if it can be, and the return is "" when the command may be tried again,
    else the cause; None when the failure is something else."""
    if not _LOST_BRIDGE.search(output):
        return None
    problem = await asyncio.to_thread(check_bridge)
    return "" if problem is None else problem


def start_own_daemon(own: dockeruserns.OwnDaemon, wait_s: float = 60) -> DockerDaemon:
    """Start agentmeter's own remapped daemon (its subordinate ids added first) and point this
    process's ``docker`` calls at it (``DOCKER_HOST``)."""
    lock_path = cache_dir() / "docker" / "dockerd-userns.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter; the others find it answering
        if own.socket.exists() and daemon_answers(host=own.host):
            daemon = DockerDaemon(started=False, host=own.host)
        else:
            dockeruserns.prepare(own)
            daemon = _start_dockerd((own.flags(),), cache_dir() / "docker" / "dockerd-userns.log",
                                    wait_s, host=own.host)
            daemon.host = own.host
    os.environ["DOCKER_HOST"] = own.host
    return daemon


def _start_dockerd(flag_sets: tuple[tuple[str, ...], ...], log_path: Path, wait_s: float,
                   host: str | None = None) -> DockerDaemon:
    """``dockerd FLAGS`` for the first flag set whose daemon answers (on ``host``)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    for flags in flag_sets:
        with open(log_path, "ab") as log:
            log.write(f"\n--- agentmeter: dockerd {' '.join(flags)} at {time.ctime()}\n".encode())
            log.flush()
            proc = subprocess.Popen(["dockerd", *flags], stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and proc.poll() is None:
            if daemon_answers(timeout=5, host=host):
                return DockerDaemon(started=True, log_path=log_path, flags=flags, proc=proc)
            time.sleep(0.3)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(20)
        tail = log_path.read_text(errors="replace").splitlines()[-8:]
        failures.append(f"dockerd {' '.join(flags)}:\n  " + "\n  ".join(tail))
    raise SandboxError(f"could not start dockerd (log: {log_path})\n" + "\n".join(failures))


# --- images -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ImageConfig:
    """What an image says its containers should default to."""

    tag: str
    workdir: str
    env: dict[str, str]
    user: str  # as written in the image ("" = root)


async def image_exists(tag: str) -> bool:
    res = await docker("image", "inspect", "--format", "{{.Id}}", tag, check=False)
    return res.returncode == 0


async def image_config(tag: str) -> ImageConfig:
    raw = (await docker("image", "inspect", "--format", "{{json .Config}}", tag)).stdout
    cfg = json.loads(raw or b"{}") or {}
    env = dict(e.partition("=")[::2] for e in (cfg.get("Env") or []))
    return ImageConfig(tag=tag, workdir=cfg.get("WorkingDir") or "", env=env,
                       user=cfg.get("User") or "")


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


#: what the daemon says when a build fails for a reason of its own, not the step's command:
#: a full disk, a lost bridge, a registry it cannot reach or that refuses, its own errors
_DAEMON_ERRORS = (
    re.compile(r"[^\n]*no space left on device[^\n]*", re.IGNORECASE),
    re.compile(r"[^\n]*could not find bridge [^\n]*|[^\n]*network bridge not found[^\n]*"),
    re.compile(r"[^\n]*(?:Get \"?https?://[^\n]*(?:dial tcp|no such host|i/o timeout|TLS handshake"
               r"|connection refused|timeout)|pull access denied|manifest for \S+ not found"
               r"|manifest unknown|toomanyrequests|error pulling image)[^\n]*"),
    re.compile(r"(?<=Error response from daemon: )[^\n]+"),
)
#: how much of the daemon's error the first line of a build failure shows
_DAEMON_ERROR_CHARS = 300


def daemon_error(output: str) -> str | None:
    """The daemon's own error in a failed build's output (the first kind of
    ``_DAEMON_ERRORS`` found, its last line), to name on the failure's first line; None when
    the output shows only a step's command failing."""
    for pattern in _DAEMON_ERRORS:
        found = pattern.findall(strip_ansi(output))
        if found:
            text = " ".join(found[-1].split()).removeprefix("Error response from daemon: ")
            return text if len(text) <= _DAEMON_ERROR_CHARS else \
                text[:_DAEMON_ERROR_CHARS - 1] + "…"
    return None


def build_failure(where: str, what: str, output: str) -> str:
    """A build failure's message: ``WHERE: WHAT`` (and the daemon's own error, when it has one,
    on that first line), then the output's tail."""
    cause = daemon_error(output)
    return f"{where}: {what}" + (f": {cause}" if cause else "") + f"\n{_tail(output)}"


def _tail(text: str, n: int = ERROR_TAIL_LINES) -> str:
    lines = [ln for ln in strip_ansi(text).splitlines() if ln.strip()]
    return "\n".join("  | " + ln for ln in lines[-n:])


def _network_flag(layer: LayerSpec) -> str:
    return "bridge" if layer.network == "full" else "none"


_FAIL_MARK = "__agentmeter_layer_failed__"
_SCRIPT_PATH = "/tmp/agentmeter-setup.sh"
_CONTEXT_DIR = "/tmp/agentmeter-context"
#: script layers run as root with errexit (like the local backend), in the build context when
#: there is one; the ERR trap names the failing line and command
_SCRIPT_WRAPPER = (
    f"cat > {_SCRIPT_PATH}; if [ -d {_CONTEXT_DIR} ]; then cd {_CONTEXT_DIR}; fi; "
    f"bash -eE -c "
    + shlex.quote(f"trap 'echo \"{_FAIL_MARK} $LINENO $BASH_COMMAND\" >&2' ERR; . {_SCRIPT_PATH}")
    + f" </dev/null; rc=$?; rm -rf {_SCRIPT_PATH} {_CONTEXT_DIR}; exit $rc"
)


async def build_script_layer(layer: LayerSpec, parent: str, tag: str, labels: list[str]) -> None:
    """Run the script as root in a container of ``parent`` and commit it as ``tag``."""
    name = f"agentmeter-build-{os.getpid()}-{tag.rpartition(':')[2][:12]}"
    await docker("rm", "-f", name, check=False)
    try:
        await docker("create", "-i", "--name", name, *labels, "-u", "0:0", "--entrypoint", "",
                     "--network", _network_flag(layer), parent, "bash", "-c", _SCRIPT_WRAPPER)
        if layer.context is not None:
            with droppings.clean_tree(layer.context) as context:  # no host bytecode caches
                await docker("cp", f"{context}/.", f"{name}:{_CONTEXT_DIR}")
        res = await docker("start", "-a", "-i", name, stdin=layer.source.encode(), check=False)
        if res.returncode != 0:
            out = res.text()
            where = ""
            for ln in reversed(out.splitlines()):
                if ln.startswith(_FAIL_MARK):
                    _, lineno, command = (ln.split(" ", 2) + ["", ""])[:3]
                    where = f":{lineno}: {command}"
                    break
            out = "\n".join(ln for ln in out.splitlines() if not ln.startswith(_FAIL_MARK))
            raise LayerBuildError(build_failure(f"{layer.origin}{where}",
                                                f"layer script failed (exit {res.returncode})",
                                                out))
        # the build ran as root; the image keeps its parent's USER
        user = (await image_config(parent)).user or "root"
        await docker("commit", "--change", 'CMD ["/bin/bash"]', "--change", f"USER {user}",
                     name, tag)
    finally:
        await docker("rm", "-f", name, check=False)


_CA_NAME = ".agentmeter-build-ca.crt"
#: RUN steps' shell while the host's CA bundle is lent: the usual variables point at it
_TRUST_SHELL = ("if [ -f {ca} ]; then export " + " ".join(f"{k}={{ca}}" for k in BUILD_CA_ENV)
                + "; fi; exec /bin/sh -c \"$0\" \"$@\"").replace("{ca}", BUILD_CA_PATH)
#: written after each image FROM while the bundle is lent: it is copied in (a public certificate
#: list, it stays in a lower layer: a later USER may not be able to remove it) and shell-form RUN
#: steps trust it; the image's shell is the default again at the end (dockerfile_render.py)
_TRUST_LINES = [f"COPY {_CA_NAME} {BUILD_CA_PATH}",
                "SHELL " + json.dumps(["/bin/sh", "-c", _TRUST_SHELL])]


def _rewrite_from(parsed: ParsedDockerfile, parent: str, trust: bool = False,
                  real_from: bool = False) -> tuple[str, list[tuple[int, str]]]:
    """``parsed`` for the classic builder (``dockerfile_render.py``) and (line, instruction) pairs
    to name a failed step's line. Every FROM image is built on ``parent`` (agentmeter's Debian
    base, with the packages of python/node images' runtimes), or with ``real_from`` the final
    stage on ``parent`` (its own image) and the other stages on their own images."""
    final = parsed.from_image

    def parent_of(image: str) -> str:
        return parent if not real_from or image == final else image

    return render_classic(parsed, parent_of, _TRUST_LINES if trust else None,
                          emulate=not real_from)


def _failed_step_line(output: str, steps: list[tuple[int, str]]) -> tuple[int, str] | None:
    """Map the last ``Step k/n : INSTR`` of a legacy build log to (line, instruction)."""
    norm = {" ".join(text.split()): line for line, text in steps}
    for ln in reversed(output.splitlines()):
        m = re.match(r"^Step \d+/\d+ : (.*)$", ln)
        if m:
            text = " ".join(m.group(1).split())
            return (norm[text], text) if text in norm else (0, text)
    return None


async def build_dockerfile_layer(layer: LayerSpec, parent: str, tag: str,
                                 labels: list[str], *, real_from: bool = False) -> None:
    """``docker build`` the Dockerfile with its FROM rewritten to ``parent``: the FROM image
    itself (``real_from``), else agentmeter's Debian base (plus the packages of the image's
    runtime, for python and node images)."""
    parsed = parse_dockerfile(layer.source, layer.origin)  # raises file:line for unsupported input
    ca = host_ca_bundle() if layer.network == "full" else None
    text, written = _rewrite_from(parsed, parent, trust=ca is not None, real_from=real_from)
    with tempfile.TemporaryDirectory(prefix="agentmeter-build-") as tmp:
        dockerfile = Path(tmp) / "Dockerfile"
        context = layer.context if layer.context is not None else Path(tmp) / "empty"
        context.mkdir(exist_ok=True)
        if ca is not None or droppings.contains(context):
            # a copy: without host bytecode caches, and lending the host's trust roots to
            # the RUN steps (sandbox/trust.py)
            lent = Path(tmp) / "context"
            shutil.copytree(context, lent, symlinks=True, ignore=droppings.ignore)
            if ca is not None:
                (lent / _CA_NAME).write_bytes(ca)
            context = lent
        dockerfile.write_text(text)
        res = await docker("build", "--force-rm", "--network", _network_flag(layer), *labels,
                           "-t", tag, "-f", str(dockerfile), str(context),
                           env={"DOCKER_BUILDKIT": "0"}, check=False)
    if res.returncode != 0:
        out = res.text()
        out = "\n".join(ln for ln in out.splitlines() if not _BUILD_NOISE.match(ln))
        step = _failed_step_line(out, written)
        where = f"{layer.origin}:{step[0]}: {step[1]}" if step and step[0] else layer.origin
        if step and not step[0]:
            where += f": {step[1]}"
        raise LayerBuildError(build_failure(where, "docker build failed", out))


async def build_layer(layer: LayerSpec, parent: str, tag: str, labels: list[str], *,
                      real_from: bool = False) -> None:
    """Build ``layer`` on ``parent`` as ``tag``, within the layer's build timeout if it has one."""
    if layer.network == "full" and (refusal := bridge_refusal()):
        raise LayerBuildError(f"{layer.origin}: {refusal}")

    async def build() -> None:
        for attempt in (1, 2):
            try:
                if layer.kind == "script":
                    await build_script_layer(layer, parent, tag, labels)
                else:
                    await build_dockerfile_layer(layer, parent, tag, labels, real_from=real_from)
                return
            except LayerBuildError as e:
                # the daemon's bridge lost under it: made again once (check_bridge), else named
                lost = await bridge_lost(str(e)) if attempt == 1 else None
                if lost is None:
                    raise
                if lost:
                    raise LayerBuildError(f"{layer.origin}: {lost}") from e

    try:
        await asyncio.wait_for(build(), layer.build_timeout_s)
    except TimeoutError:
        raise LayerBuildError(f"{layer.origin}: the environment build took longer than its "
                              f"build_timeout_sec ({layer.build_timeout_s:g}s)") from None


# --- killing the processes of one exec -------------------------------------------------------

#: run inside as the exec's user and as root: SIGSTOP then SIGKILL every process whose environment
#: holds the marker. Bash builtins only, so it needs no fork (a pids limit may be exhausted).
KILL_MARKED = r"""
for round in 1 2 3 4 5 6 7 8; do
  found=
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" = "$$" ] && continue
    while IFS= read -r -d '' v; do
      if [ "$v" = "$1" ]; then kill -STOP "$p"; found="$found $p"; break; fi
    done 2>/dev/null < "$e"
  done
  [ -z "$found" ] && exit 0
  kill -KILL $found 2>/dev/null
done
"""


def kill_marked_on_host(marker: bytes, container_id: str) -> int:
    """Stop then kill, from the host, the processes of the container holding ``marker``."""
    killed = 0
    for _ in range(8):
        found: list[int] = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker not in f.read().split(b"\0"):
                        continue
                with open(f"/proc/{entry}/cgroup") as f:
                    if container_id not in f.read():
                        continue
                os.kill(int(entry), signal.SIGSTOP)
            except OSError:
                continue
            found.append(int(entry))
        if not found:
            break
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed += len(found)
    return killed
