"""``InstalledCliAgent``: drives any :class:`CliSpec` inside the trial's sandbox.

Per trial: write the spec's config files (one exec), start the CLI as the ``agent`` user in the
task's workdir with its stderr going to a file, watch stdout for the completion marker (a CLI
that lingers after finishing is ended once the grace period passes; that is not a timeout),
collect the native transcript, parse it into the common trajectory, and classify:

- real timeout → ``timed_out=True``;
- non-zero exit without a final answer → ``error`` (crash);
- output the parser cannot read → ``error`` describing it (the verifier still runs);
- exit 0 without doing anything → no error: the verifier fails it.

Nothing a CLI prints can raise out of :meth:`InstalledCliAgent.run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import tarfile
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentmeter.agents.base import AgentContext, AgentRun
from agentmeter.agents.cli import mcp
from agentmeter.agents.cli.spec import CliDefinition, ParsedRun, ParseInput, render
from agentmeter.jsonshape import structural_tokens
from agentmeter.records import CLI_TRAJECTORY
from agentmeter.sandbox import fsnames
from agentmeter.sandbox.accounts import account_of
from agentmeter.sandbox.archive import CopyTooLarge
from agentmeter.sandbox.spec import AGENT_USER, HARNESS_ENV, LayerSpec, SandboxError

#: agentmeter's own account's HOME (a task's image USER has its own: ``values``)
HOME = f"/home/{AGENT_USER}"
STDOUT_CAP = 32_000_000
#: the most of one transcript path (its tar stream) copied out; a larger one is left out
TRANSCRIPT_MAX_BYTES = 32 << 20
#: a transcript (the agent's file) with more JSON structure than this is kept, not parsed on the
#: host: 32 MiB of ``{},{},...`` parses into ~1.5 GB; this many, ~150 MB at most
TRANSCRIPT_MAX_TOKENS = 1_000_000
#: the most of a text file the CLI writes (its stderr log) that is read
TEXT_MAX_BYTES = 8 << 20


class CliOptions(BaseModel):
    """Options of any installed CLI agent (``agent_options`` in a run request)."""

    model_config = ConfigDict(extra="forbid")

    extra_args: list[str] = Field(default_factory=list,
                                  description="arguments inserted before the prompt")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment")
    completion_grace_s: float | None = Field(default=None, ge=0)


class _Watch:
    """Collects stdout and notices the completion marker."""

    def __init__(self, marker: str | None) -> None:
        self.marker = marker.encode() if marker else None
        self.buf = bytearray()
        self.done = asyncio.Event()
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        if len(self.buf) < STDOUT_CAP:
            self.buf += chunk[: STDOUT_CAP - len(self.buf)]
        if self.marker is not None and not self.done.is_set():
            window = self._tail + chunk
            if self.marker in window:
                self.done.set()
            self._tail = window[-len(self.marker):]


class InstalledCliAgent:
    """An agent CLI installed into cached layers and run inside the sandbox."""

    uses_model = True

    def __init__(self, definition: CliDefinition, version: str | None = None,
                 options: CliOptions | None = None) -> None:
        self.definition = definition
        self.spec = definition.spec
        self.name = self.spec.name
        self.version: str | None = self.spec.version(version)
        self.options = options or CliOptions()

    def layers(self) -> list[LayerSpec]:
        assert self.version is not None
        return self.spec.layers(self.version)

    def values(self, ctx: AgentContext) -> dict[str, str]:
        assert ctx.gateway is not None and self.version is not None
        home = account_of(ctx.sandbox).home.rstrip("/")  # the image's USER's (root: /root)
        return {
            "prompt": ctx.instruction, "model": ctx.gateway.model,
            # the name without its provider prefix: CLIs that pick features by model name
            # (Codex, Claude Code) recognise it; the gateway serves the trial's model either way
            "model_id": ctx.gateway.model.split("/", 1)[-1],
            "base_url": ctx.gateway.base_url.rstrip("/"), "token": ctx.gateway.token,
            "home": home or "/", "state": f"{home}/.agentmeter/{self.name}",
            "workdir": ctx.task.workdir or ctx.sandbox.workdir,
            "install": self.spec.prefix(self.version), "version": self.version,
            "instruction_file": f"{home}/.agentmeter/{self.name}/instruction.md",
        }

    async def run(self, ctx: AgentContext) -> AgentRun:
        if ctx.gateway is None:
            return AgentRun(error=f"agent {self.name} needs a gateway endpoint")
        ctx.logs_dir.mkdir(parents=True, exist_ok=True)
        v = self.values(ctx)
        meta: dict[str, Any] = {"agent": self.name, "version": self.version}
        t0 = time.monotonic()
        files, mcp_args, mcp_notes = mcp.configure(
            self.spec.mcp, ctx.task.mcp_servers,
            {render(p, v): render(c, v) for p, c in self.spec.files.items()}, v["state"])
        await self._write_files(ctx, v, files)
        meta["setup_s"] = time.monotonic() - t0

        spec = self.spec
        # extra arguments go before the prompt (and before a "--" or an option such as "-p"
        # that introduces it)
        cut = len(spec.args) - (2 if spec.args[-2:-1] and spec.args[-2].startswith("-") else 1)
        resume: tuple[str, ...] = ()
        if ctx.session is not None and spec.continue_args:
            if ctx.session.state.get(self.name):  # it ran before in this scenario run
                resume = spec.continue_args
                ctx.session.continued = True
            ctx.session.state[self.name] = True
        exe = render(spec.executable, v)
        if "/" in exe and not exe.startswith("/"):
            exe = f"{v['install']}/{exe}"
        argv = [exe,
                *(render(a, v) for a in spec.args[:cut]), *resume, *self.options.extra_args, *mcp_args,
                *(render(a, v) for a in spec.args[cut:])]
        env = {"HOME": v["home"]} | {k: render(val, v) for k, val in spec.env.items()} \
            | mcp.environment(spec.mcp, ctx.task.mcp_servers) | self.options.env
        stderr_path = f"{v['state']}/stderr.log"
        # stderr goes to a file so that it survives the harness ending a lingering CLI
        wrapped = ["bash", "-c", 'exec "$@" 2>>"$0"', stderr_path, *argv]
        meta["argv"] = [a if a != v["prompt"] else "<instruction>" for a in argv]
        watch = _Watch(spec.completion_marker)
        grace = spec.completion_grace_s if self.options.completion_grace_s is None \
            else self.options.completion_grace_s
        meta["started_at"] = datetime.now(UTC).isoformat()
        started = time.monotonic()
        proc = asyncio.create_task(ctx.sandbox.exec(
            wrapped, user=AGENT_USER, env=env, cwd=v["workdir"], timeout=ctx.timeout_s,
            on_stdout=watch.feed))
        exit_code, timed_out, ended_by_harness = await self._wait(proc, watch, grace, ctx.stop)
        command_s = time.monotonic() - started
        meta.update(exit_code=exit_code, timed_out=timed_out, command_s=command_s,
                    ended_after_completion=ended_by_harness)

        stdout = watch.buf.decode(errors="replace")
        stderr = await self._read_text(ctx, stderr_path)
        artifacts = self._save_logs(ctx, stdout, stderr)
        notes: list[str] = list(mcp_notes)
        transcripts = await self._collect(ctx, v, artifacts, notes)
        error: str | None = None
        readable = stdout
        if structural_tokens(watch.buf, TRANSCRIPT_MAX_TOKENS) > TRANSCRIPT_MAX_TOKENS:
            readable = ""  # kept in its log, not parsed (as a transcript that size)
            notes.append(f"stdout not parsed: more than {TRANSCRIPT_MAX_TOKENS} JSON structural "
                         "tokens")
        try:
            parsed = self.definition.parse(ParseInput(readable, stderr, exit_code, transcripts))
        except Exception as e:  # garbage from a CLI must never take the trial down
            parsed = ParsedRun()
            error = f"{self.name}: unparseable output ({type(e).__name__}: {e})"
        error = error or self._classify(parsed, exit_code, timed_out, ended_by_harness, stderr)
        meta.update(error=error, notes=notes, final_message=parsed.final_message,
                    usage=parsed.usage.model_dump() if parsed.usage else None,
                    tool_calls=dict(parsed.tool_calls), files_read=parsed.files_read,
                    turns=parsed.turns, steps=[asdict(s) for s in parsed.steps])
        path = ctx.logs_dir / CLI_TRAJECTORY
        path.write_text(json.dumps(meta, indent=1, ensure_ascii=False, default=str))
        artifacts[CLI_TRAJECTORY] = (path, "transcript")
        return AgentRun(exit_code=exit_code, timed_out=timed_out, error=error,
                        command_s=command_s, tool_calls=dict(parsed.tool_calls),
                        files_read=list(parsed.files_read), turns=parsed.turns,
                        self_reported_usage=parsed.usage,
                        final_message=parsed.final_message, artifacts=artifacts, notes=notes)

    async def _write_files(self, ctx: AgentContext, v: dict[str, str],
                           files: dict[str, str]) -> None:
        """All config files (``files``: path -> content, rendered) and the state dir in one
        exec, as the agent user."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            entries = {f"{v['state']}/.keep": "", v["instruction_file"]: v["prompt"]}
            entries |= files
            for path, content in entries.items():
                data = content.encode()
                info = tarfile.TarInfo(path.lstrip("/"))
                info.size, info.mode = len(data), 0o600
                tar.addfile(info, io.BytesIO(data))
        r = await ctx.sandbox.exec(["tar", "-x", "--no-same-owner", "-C", "/"],
                                   stdin=buf.getvalue(), user=AGENT_USER, cwd="/")
        if r.exit_code != 0:
            raise SandboxError(f"{self.name}: writing its config files failed: {r.stderr.strip()}")

    @staticmethod
    async def _wait(proc: asyncio.Task[Any], watch: _Watch, grace: float,
                    stop: asyncio.Event) -> tuple[int | None, bool, bool]:
        """(exit code, timed out, ended by the harness: after completion, or on ``stop``)."""
        done_wait = asyncio.create_task(watch.done.wait())
        stop_wait = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({proc, done_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not proc.done() and not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.wait({proc, stop_wait}), grace)
            if proc.done():
                r = proc.result()
                return r.exit_code, r.timed_out, False
            proc.cancel()  # the sandbox kills the whole process tree
            with contextlib.suppress(asyncio.CancelledError):
                await proc
            return None, False, True
        finally:
            done_wait.cancel()
            stop_wait.cancel()
            if not proc.done():
                proc.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await proc

    @staticmethod
    async def _read_text(ctx: AgentContext, path: str) -> str:
        """A text file the CLI wrote, at most TEXT_MAX_BYTES of it (a larger one: its tail)."""
        try:
            return (await ctx.sandbox.read_file(path, max_bytes=TEXT_MAX_BYTES)).decode(
                errors="replace")
        except CopyTooLarge:
            # root, on a file the agent wrote: the harness's tail, not one on the image's PATH
            r = await ctx.sandbox.exec(["tail", "-c", str(TEXT_MAX_BYTES), "--", path],
                                       user="root", cwd="/", env=HARNESS_ENV,
                                       output_limit=TEXT_MAX_BYTES)
            return f"[agentmeter: {path} is larger than {TEXT_MAX_BYTES} bytes; its tail]\n" + \
                r.stdout
        except SandboxError:
            return ""

    def _save_logs(self, ctx: AgentContext, stdout: str,
                   stderr: str) -> dict[str, tuple[Path, str]]:
        out: dict[str, tuple[Path, str]] = {}
        for name, text in ((f"{self.name}.stdout.log", stdout), (f"{self.name}.stderr.log", stderr)):
            p = ctx.logs_dir / name
            p.write_text(text)
            out[name] = (p, "agent_log")
        return out

    async def _collect(self, ctx: AgentContext, v: dict[str, str],
                       artifacts: dict[str, tuple[Path, str]], notes: list[str]) -> dict[str, str]:
        """Copy the native transcript out, each path bounded by TRANSCRIPT_MAX_BYTES; returns
        sandbox path -> text for the parser. One too large is left out with a note."""
        texts: dict[str, str] = {}
        native = ctx.logs_dir / "native"
        for template in self.spec.transcripts:
            src = render(template, v).rstrip("/")
            dst = native / src.strip("/").replace("/", "_")
            try:
                notes += await ctx.sandbox.copy_out(src, dst, max_bytes=TRANSCRIPT_MAX_BYTES)
            except CopyTooLarge as e:  # nothing of it is kept: a note says why
                notes.append(f"transcript not kept: {e}")
                continue
            except SandboxError:
                continue  # the CLI did not write it (crashed early, or this version does not)
            budget = fsnames.Budget()  # the folder is the agent's: any depth, any names
            for rel in fsnames.walk_files(str(dst), budget):
                f = dst / rel
                data = f.read_bytes()
                if structural_tokens(data, TRANSCRIPT_MAX_TOKENS) > TRANSCRIPT_MAX_TOKENS:
                    notes.append(f"transcript {src}/{rel} not parsed: more than "
                                 f"{TRANSCRIPT_MAX_TOKENS} JSON structural tokens")
                else:
                    texts[f"{src}/{rel}" if rel != Path(src).name else src] = \
                        data.decode(errors="replace")
                artifacts[f"native/{dst.name}/{rel}"] = (f, "transcript")
            if budget.note:
                notes.append(f"transcript {src}: {budget.note}")
        return texts

    def _classify(self, parsed: ParsedRun, exit_code: int | None, timed_out: bool,
                  ended_by_harness: bool, stderr: str) -> str | None:
        if timed_out or ended_by_harness:
            return None
        finished = parsed.completed or parsed.final_message is not None
        if exit_code not in (0, None) and not finished:
            why = parsed.cli_error or _tail(stderr) or "no output"
            return f"{self.name} exited with code {exit_code}: {why}"
        if parsed.cli_error and not finished:
            return f"{self.name}: {parsed.cli_error}"
        return None


def _tail(text: str, lines: int = 8, chars: int = 1500) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])[-chars:]
