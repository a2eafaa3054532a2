"""Running generated cases (and ``--help``) against the oracle in the task's own environment.

The task's environment is built and started like a trial's sandbox (no network, the task's
limits); the in-sandbox engine (``verify/difftest/engine.py``) runs the cases with
``--sides oracle``, twice for the determinism guard; the raw results are read back. The task
directory need not load yet (no instruction.md or cases.jsonl while it is being built): it is
loaded from a temporary copy holding placeholders for what is missing.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentmeter.runner.tasksandbox import base_image, task_environment
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.registry import make_backend
from agentmeter.sandbox.spec import SandboxSpec, task_limits
from agentmeter.tasks.errors import TaskError
from agentmeter.tasks.models import Task
from agentmeter.tasks.suite import load_task
from agentmeter.tasks.task_toml import read_task_toml
from agentmeter.verify.difftest.config import Case, DifftestConfig
from agentmeter.verify.difftest.verifier import engine_config, engine_files

STAGE = "/difftest-synth"
#: the most raw results read back per run
RESULTS_MAX_BYTES = 256 << 20
HELP_TIMEOUT_S = 10.0


class OracleRunError(RuntimeError):
    """The task cannot be loaded or its oracle run (one line)."""


def load_for_synthesis(task_dir: Path) -> Task:
    """The task, loaded from a copy with placeholders for instruction.md and the cases."""
    with tempfile.TemporaryDirectory(prefix="agentmeter-synth-") as tmp:
        copy = Path(tmp) / task_dir.resolve().name
        shutil.copytree(task_dir, copy, ignore=shutil.ignore_patterns(".git"))
        if not (copy / "instruction.md").is_file():
            (copy / "instruction.md").write_text("(being built)\n")
        try:
            task = _load(copy)
        except TaskError as e:  # name the task's own files, not the temporary copy's
            raise OracleRunError(str(e).replace(str(copy), str(task_dir.resolve()))) from None
        cfg = task.difftest
        if cfg is None:
            raise OracleRunError(f"{task_dir}/task.toml: no [difftest] section")
        return task.model_copy(update={"path": task_dir.resolve(),
                                       "environment_dir": task_dir.resolve() / "environment",
                                       "dockerfile": _moved(task.dockerfile, copy, task_dir),
                                       "setup_script": _moved(task.setup_script, copy, task_dir),
                                       "tests_dir": task_dir.resolve() / "tests"})


def _moved(p: Path | None, old: Path, new: Path) -> Path | None:
    return None if p is None else new.resolve() / p.relative_to(old)


def _load(copy: Path) -> Task:
    try:
        return load_task(copy)
    except TaskError as e:
        if not all(p.field == "difftest.cases" for p in e.problems):
            raise
    conf = read_task_toml(copy / "task.toml").difftest
    tests = copy / "tests"
    tests.mkdir(exist_ok=True)
    name = conf.cases if conf is not None else "cases.jsonl"
    (tests / name).write_text('{"id": "c0001", "class": "x", "command": "true"}\n')
    return load_task(copy)


def sandbox_spec(task: Task) -> SandboxSpec:
    image = base_image(task)
    return SandboxSpec(base=task.base, image=image,
                       layers=tuple([] if image is not None else task_environment(task)),
                       workdir=task.workdir, env=dict(task.environment_env), user="root",
                       limits=task_limits(task.memory_mb, task.cpus, task.storage_mb),
                       network="none")


class OracleSandbox:
    """The task's environment, started; ``async with`` stops it."""

    def __init__(self, task: Task, backend: str = "local") -> None:
        assert task.difftest is not None
        self.task = task
        self.cfg: DifftestConfig = task.difftest
        self.backend = make_backend(backend)
        self.sandbox: Sandbox | None = None

    async def __aenter__(self) -> OracleSandbox:
        spec = sandbox_spec(self.task)
        await self.backend.prepare(spec)
        self.sandbox = await self.backend.start(spec)
        conf = engine_config(self.cfg, self.cfg.workspace or self.sandbox.workdir)
        try:
            for name, data in engine_files().items():
                await self.sandbox.write_file(f"{STAGE}/{name}", data, mode=0o600)
            await self.sandbox.write_file(f"{STAGE}/config.json", conf, mode=0o600)
        except BaseException:
            await self.sandbox.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.sandbox is not None:
            await self.sandbox.stop()

    async def run_cases(self, cases: list[Case], run: int) -> list[dict[str, Any]]:
        """The engine's raw oracle results of ``cases`` (one run)."""
        assert self.sandbox is not None
        await self.sandbox.write_file(f"{STAGE}/cases.jsonl",
                                      "".join(c.line() + "\n" for c in cases), mode=0o600)
        out = f"{STAGE}/out{run}"
        budget = len(cases) * (self.cfg.case_timeout_sec * 1.5 + 5) + 120
        r = await self.sandbox.exec(
            ["python3", f"{STAGE}/engine.py", "--config", f"{STAGE}/config.json", "--cases",
             f"{STAGE}/cases.jsonl", "--out", out, "--sides", "oracle"],
            cwd="/", user="root", timeout=budget)
        if r.timed_out:
            raise OracleRunError(f"the oracle run did not finish in {budget:.0f}s")
        if r.exit_code == 127:
            raise OracleRunError("the task's environment has no python3 (the engine needs it)")
        if r.exit_code != 0:
            tail = (r.stderr.strip().splitlines() or [f"exit {r.exit_code}"])[-1]
            raise OracleRunError(f"the oracle run failed: {tail}")
        raw = await self.sandbox.read_file(f"{out}/cases.jsonl", max_bytes=RESULTS_MAX_BYTES,
                                           user="root")
        return [json.loads(line) for line in raw.decode("utf-8", "replace").splitlines()
                if line.strip()]

    async def run(self, argv: list[str]) -> tuple[int, str]:
        """``argv`` run as root with the oracle's bin first on PATH: (exit, stdout+stderr)."""
        assert self.sandbox is not None
        path = f"{self.cfg.oracle_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        r = await self.sandbox.exec(argv, cwd="/tmp", user="root", timeout=HELP_TIMEOUT_S,
                                    env={"PATH": path, "COLUMNS": "80", "NO_COLOR": "1",
                                         "TERM": "dumb"})
        return (124 if r.timed_out else r.exit_code), r.stdout + r.stderr

    def sync_runner(self, loop: asyncio.AbstractEventLoop) -> Callable[[list[str]], tuple[int, str]]:
        """:meth:`run` for synchronous callers in another thread (the help walk)."""
        def run(argv: list[str]) -> tuple[int, str]:
            return asyncio.run_coroutine_threadsafe(self.run(argv), loop).result()
        return run
