"""The ``docker`` CLI: run it and collect its output, and the labels that mark every container
the backends create with its owner (``host:pid:starttime``), so stale ones can be told apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
from dataclasses import dataclass

from agentmeter.procinfo import start_time
from agentmeter.sandbox.spec import SandboxError

#: every container the backends create carries LABEL=1 and OWNER_LABEL=host:pid:starttime
LABEL = "agentmeter"
OWNER_LABEL = "agentmeter.owner"


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


def owner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{start_time(os.getpid())}"


def owner_alive(label: str) -> bool:
    host, _, rest = label.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # not ours to judge
    return start_time(int(pid)) == start
