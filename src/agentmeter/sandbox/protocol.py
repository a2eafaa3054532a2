"""The one Sandbox interface every other package uses, and the backend factory interface."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from agentmeter.sandbox.accounts import Account
from agentmeter.sandbox.archive import COPY_OUT_MAX_BYTES, READ_FILE_MAX_BYTES
from agentmeter.sandbox.spec import DEFAULT_OUTPUT_LIMIT, ExecResult, FsDiff, FsSnapshot, SandboxSpec

#: Paths a snapshot/diff ignores by default: any component starting with a dot.
DEFAULT_IGNORE: tuple[str, ...] = (".*",)

OutputCallback = Callable[[bytes], None]


@runtime_checkable
class Sandbox(Protocol):
    """A running sandbox. All methods are coroutines; ``stop`` is idempotent and always cleans up.

    ``account`` is who the exec user ``agent`` is (accounts.py): ``accounts.SANDBOX_ACCOUNT``
    unless ``spec.agent_user`` names another, resolved before anything of the agent runs. A
    backend states it from the start (a plug-in backend that knows no other sets
    ``SANDBOX_ACCOUNT``); the runner reads it to learn whether the agent is root.

    Optional: ``async set_network(network, allowed_hosts)``, the network of the next phase of a
    sandbox started with ``spec.network_switch`` (netswitch.py; the local and docker sandboxes
    have it). A sandbox without it cannot switch: ``netswitch.set_network`` refuses, and a task
    whose shared verifier has a network of its own fails on that backend."""

    id: str
    spec: SandboxSpec
    account: Account

    @property
    def workdir(self) -> str: ...

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
        """Run ``cmd`` (a string goes to ``bash -c``) and wait. On timeout or cancellation the whole
        process tree is killed, daemonized children included."""
        ...

    async def write_file(self, path: str, data: bytes | str, *, mode: int = 0o644,
                         user: str | None = None) -> None: ...

    async def read_file(self, path: str, *, max_bytes: int = READ_FILE_MAX_BYTES,
                        user: str | None = None) -> bytes:
        """A regular file's bytes, read as ``user`` (default: the agent's; "root" for files only
        the harness's root processes wrote). A missing file, one that is a symlink or lies
        under one, or one larger than ``max_bytes`` (then ``archive.CopyTooLarge``), raises
        SandboxError; no more than the cap is ever read. The sandbox's image runs nothing of it
        (copyout.py)."""
        ...

    async def copy_in(self, host_src: Path, dst: str, *, user: str | None = None) -> None:
        """Copy a host file or directory tree to ``dst`` inside (created, owned by ``user``)."""
        ...

    async def copy_out(self, src: str, host_dst: Path, *, exclude: Sequence[str] = (),
                       max_bytes: int = COPY_OUT_MAX_BYTES, user: str | None = None) -> list[str]:
        """Copy a file or tree out into the directory ``host_dst``, read as ``user`` (default:
        the agent's; "root" for what only the harness's root processes wrote); returns notes
        on members left out (links that would leave the copy, special files, unreadable files).
        ``src`` being a symlink or lying under one raises SandboxError; ``exclude`` are name
        globs left out. The copy is streamed through a temporary host file: one whose archive
        exceeds ``max_bytes`` is stopped there, raises ``archive.CopyTooLarge`` and writes
        nothing. The sandbox's image runs nothing of it (copyout.py, untar.py)."""
        ...

    async def kill_user_processes(self, user: str) -> int:
        """Kill every process of ``user`` still alive in the sandbox (what it detached with
        setsid, nohup or a daemon), until none is left; returns how many there were. Called
        between phases, when no exec of ``user`` runs. Raises SandboxError if some survive."""
        ...

    async def snapshot(self, root: str | None = None,
                       ignore: Sequence[str] = DEFAULT_IGNORE) -> FsSnapshot: ...

    async def diff(self, snapshot: FsSnapshot,
                   ignore: Sequence[str] = DEFAULT_IGNORE) -> FsDiff: ...

    async def stop(self) -> None: ...


class SandboxBackend(Protocol):
    """Makes sandboxes of one kind (``local`` or ``docker``)."""

    name: str

    async def prepare(self, spec: SandboxSpec) -> None:
        """Build (or find cached) the base and every layer of ``spec``; no sandbox is started."""
        ...

    async def start(self, spec: SandboxSpec) -> Sandbox: ...

    async def cleanup_stale(self) -> int:
        """Remove sandboxes left behind by a process that died; returns how many were removed."""
        ...
