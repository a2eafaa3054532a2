"""A local sandbox's exec (see local.py's docstring): its user checked, its command (local_command.py)
started through the zygote or as a process group with the seccomp filter's descriptor, its
output collected under a cap, and on a timeout or cancellation the exec killed (its PID namespace
with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from agentmeter.sandbox import seccomp, zygote, zygote_wire
from agentmeter.sandbox.local_command import CommandSandbox
from agentmeter.sandbox.local_keeper import DEFAULT_PATH
from agentmeter.sandbox.masks import SessionNoticeFilter
from agentmeter.sandbox.output import CappedBuffer, collect_output, wait_drained
from agentmeter.sandbox.protocol import OutputCallback
from agentmeter.sandbox.spec import AGENT_USER, DEFAULT_OUTPUT_LIMIT, ExecResult, SandboxError


class ExecSandbox(CommandSandbox):
    """A local sandbox's execs."""

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
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        return await self._run(argv, cwd=cwd, env=env, user=user, stdin=stdin, timeout=timeout,
                               output_limit=output_limit, on_stdout=on_stdout)

    async def _run(self, argv: list[str], *, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None,
                   stdin: bytes | None = None, timeout: float | None = None,
                   output_limit: int = DEFAULT_OUTPUT_LIMIT,
                   on_stdout: OutputCallback | None = None, busybox: bool = False) -> ExecResult:
        """``exec``; with ``busybox`` the host's busybox is at BUSYBOX and the environment is
        a minimal one of the harness's (copyout.py)."""
        if self._stopped or self._keeper is None:
            raise SandboxError(f"sandbox {self.id} is not running")
        user = user or self.spec.user
        if user not in ("root", AGENT_USER):
            raise SandboxError(f"unknown sandbox user {user!r} (use 'root' or '{AGENT_USER}')")
        if user == AGENT_USER and self.account.root:  # the image's USER is root (accounts.py)
            user = "root"
        run_env = {"PATH": DEFAULT_PATH, "LC_ALL": "C"} if busybox else self._env(user, env)
        keeper = self._keeper
        through_zygote = isinstance(keeper, zygote.Keeper)
        # without bwrap (zygote_direct.py) the exec's init loaded the seccomp program ahead
        direct = isinstance(keeper, zygote.Keeper) and keeper.direct and keeper.dev and not busybox
        sfd = seccomp.program_fd() if seccomp.supported() and not direct else None  # see _command
        # bwrap's own init stays visible inside as /proc/1/environ: give it nothing of ours
        bwrap_env = {"PATH": os.environ.get("PATH", DEFAULT_PATH)}
        what: dict[str, Any]
        if direct:
            what = {"direct": self._direct(argv, cwd or self.workdir, run_env, user)}
        else:
            full = self._command(argv, cwd or self.workdir, run_env, user,
                                 None if sfd is None else zygote_wire.SECCOMP_FD if through_zygote
                                 else sfd, busybox)
            what = {"argv": full, "env": bwrap_env}
        started = time.monotonic()
        proc: asyncio.subprocess.Process | zygote.Exec
        try:
            if isinstance(keeper, zygote.Keeper):
                proc = await keeper.spawn(
                    what, cgroup=[] if self._cgroup is None else self._cgroup.procs_files,
                    keyring=self._keyring, stdin=stdin is not None, seccomp_fd=sfd)
            else:
                full = what["argv"]
                proc = await asyncio.create_subprocess_exec(
                    *full, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                    env=bwrap_env, pass_fds=() if sfd is None else (sfd,))
        finally:
            if sfd is not None:
                os.close(sfd)
        out = CappedBuffer(output_limit)
        # keyctl's notice only comes from the chain of programs (the zygote joins it silently)
        err = (SessionNoticeFilter(output_limit) if self._keyring and not through_zygote
               else CappedBuffer(output_limit))
        timed_out = False
        try:
            code = await asyncio.wait_for(collect_output(proc, stdin, out, err, on_stdout), timeout)
        except TimeoutError:
            timed_out = True
            code = await self._kill(proc)
        except BaseException:
            await self._kill(proc)
            raise
        finally:
            if isinstance(proc, zygote.Exec):
                proc.close()
        return ExecResult(exit_code=code, stdout=out.text(), stderr=err.text(), timed_out=timed_out,
                          duration_s=time.monotonic() - started, stdout_truncated=out.truncated,
                          stderr_truncated=err.truncated)

    async def _kill(self, proc: asyncio.subprocess.Process | zygote.Exec) -> int:
        # bwrap is the leader of its own session; killing it ends the PID namespace it made.
        if isinstance(proc, zygote.Exec):
            await proc.kill()
            return await wait_drained(proc)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        return await wait_drained(proc)

    async def kill_user_processes(self, user: str) -> int:
        """Nothing can be left: each exec has its own PID namespace, which the kernel empties
        when the exec's first process exits, detached daemons included (the namespace's init
        is bwrap; tests/test_hostile_leftovers.py checks it)."""
        return 0
