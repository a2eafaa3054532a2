"""The ``rubric`` verifier kind: a task's criteria checked, captured and judged (AgencyBench).

Staged like every kind (``command.stage_verifier``): ``rubric.toml`` and ``capture_plan.json``
sit root-only while the agent runs. The rubric itself is read here, on the host, from the task's
files, never from the sandbox. At verification:

1. the working directory (``task.workdir``, else the sandbox's) is copied to a host scratch
   directory under the trial's artifact directory, before ``/tests`` exists in the sandbox (so a
   link the agent planted cannot make a check read the tests);
2. ``/tests`` is put in place and the ``command`` checks run in the sandbox (``checks.py``);
   ``file`` checks read the host copy;
3. with ``tests/capture_plan.json`` the browser capture runs on the copy (``capture.py``) and the
   ``capture`` checks read its labels;
4. the text and vision judges are asked through ``ctx.judge`` (``judging.py``), one call each.

Score: ``items`` = 10·Σ w·satisfied / Σ w over every item; ``judges`` = the mean of the judges'
0-10 scores (AgencyBench: "the final score is calculated as the average of the ratings from the
text and vision-based judges"). reward = score / 10. Everything is decided here from exit codes,
host files and judge replies: nothing the agent writes in the sandbox is read as a verdict.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentmeter.sandbox.archive import CopyTooLarge
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import SandboxError
from agentmeter.verify.command import AS_AGENT, TESTS_MOUNT, stage_verifier, unstage_verifier
from agentmeter.verify.judge import JudgeClient, JudgeImage, JudgeMessage
from agentmeter.verify.protocol import (
    SandboxNeeds,
    Verdict,
    VerificationError,
    VerifierArtifact,
    VerifierContext,
)
from agentmeter.verify.rubric import frames, judging
from agentmeter.verify.rubric.capture import CaptureOutcome, plan_timeout, run_capture
from agentmeter.verify.rubric.checks import (
    Deliverables,
    ItemVerdict,
    check_capture,
    check_file,
    run_command,
    verdict,
)
from agentmeter.verify.rubric.config import Rubric, RubricError, load_rubric, rubric_files

if TYPE_CHECKING:
    from agentmeter.tasks.models import Task

#: the most of the working directory copied out for checks, judges and the capture
DELIVERABLES_MAX_BYTES = 64 << 20
DELIVERABLES_EXCLUDE = ("node_modules", ".git", "__pycache__", ".venv")
NO_JUDGE = "judge items need --judge-model"


def rubric_of(task: Task) -> tuple[Rubric, Path | None]:
    """The task's rubric and its capture plan file (VerificationError if unreadable now)."""
    rubric_file, plan = rubric_files(task.verifier_files())
    if rubric_file is None:
        raise VerificationError(f"task {task.id} has verifier kind 'rubric' but no tests/rubric.toml")
    try:
        return load_rubric(rubric_file, plan), plan
    except RubricError as e:
        raise VerificationError(str(e)) from e


def seeds_of(task: Task) -> tuple[Path, ...]:
    """What the task itself puts in the working directory: a scenario's steps' ``workdir/``
    (all of them: a file a later step seeds is not the agent's either), else the task's own."""
    if task.scenario is not None and task.path.parent.is_dir():
        return tuple(sorted(d / "workdir" for d in task.path.parent.iterdir()
                            if (d / "workdir").is_dir()))
    return () if task.step_workdir is None else (task.step_workdir,)


async def copy_deliverables(sandbox: Sandbox, workdir: str, dest: Path,
                            seeds: tuple[Path, ...] = ()) -> Deliverables:
    try:
        await sandbox.copy_out(workdir, dest, exclude=DELIVERABLES_EXCLUDE,
                               max_bytes=DELIVERABLES_MAX_BYTES)
    except CopyTooLarge:
        return Deliverables(None, f"{workdir} holds more than {DELIVERABLES_MAX_BYTES >> 20} MiB")
    except SandboxError as e:
        return Deliverables(None, str(e)[:300])
    return Deliverables(dest, seeds=seeds)


def _prompt_json(messages: list[JudgeMessage]) -> str:
    return json.dumps([{"role": m.role, "content": [
        p if isinstance(p, str) else {"image": p.path.name, "media_type": p.media_type}
        for p in m.content]} for m in messages], indent=1, ensure_ascii=False)


class RubricVerifier:
    """Checks, captures and judges a task's rubric items."""

    def sandbox_needs(self, task: Task) -> SandboxNeeds:
        return SandboxNeeds()

    async def stage(self, task: Task, sandbox: Sandbox) -> None:
        await stage_verifier(task, sandbox)

    async def verify(self, task: Task, sandbox: Sandbox, ctx: VerifierContext) -> Verdict:
        rubric, plan = rubric_of(task)
        scratch = Path(tempfile.mkdtemp(prefix=".rubric-", dir=ctx.artifact_dir))
        try:
            return await _Run(task, sandbox, ctx, rubric, plan, scratch).verdict()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


class _Run:
    """One verification: its state from the copy to the verdict."""

    def __init__(self, task: Task, sandbox: Sandbox, ctx: VerifierContext, rubric: Rubric,
                 plan: Path | None, scratch: Path) -> None:
        self.task, self.sandbox, self.ctx, self.rubric, self.plan = task, sandbox, ctx, rubric, plan
        self.scratch = scratch
        self.deadline = time.monotonic() + ctx.timeout_s
        self.artifacts: list[VerifierArtifact] = []
        self.results: dict[str, ItemVerdict] = {}
        self.command_s = 0.0
        self.capture: CaptureOutcome | None = None
        self.files = Deliverables(None, "not copied")

    def _add(self, name: str, path: Path, kind: str) -> None:
        self.artifacts.append(self.ctx.add_artifact(name, path, kind))

    def _write(self, name: str, text: str) -> None:
        path = self.ctx.artifact_dir / name
        path.write_text(text, encoding="utf-8")
        self._add(name, path, "verifier_output")

    def _left(self) -> float:
        return self.deadline - time.monotonic()

    async def verdict(self) -> Verdict:
        items = self.rubric.items
        workdir = self.task.workdir or self.sandbox.workdir
        if self.plan is not None or any(i.check != "command" for i in items):
            self.files = await copy_deliverables(self.sandbox, workdir, self.scratch / "workdir",
                                                 seeds_of(self.task))
        await unstage_verifier(self.task, self.sandbox)
        await self._commands(workdir)
        for item in items:
            if item.check == "file":
                self.results[item.id] = check_file(item, self.files)
        if self.plan is not None:
            await self._capture()
        for item in items:
            if item.check == "capture":
                self.results[item.id] = check_capture(
                    item, self.capture.labels if self.capture is not None else None)
        judges: dict[str, judging.JudgeResult] = {}
        problem = None
        if self.rubric.needs_judge and self.ctx.judge is None:
            problem = NO_JUDGE
            for item in items:
                if item.judged:
                    self.results[item.id] = verdict(item, False,
                                                    "not judged: the run has no judge model")
        elif self.ctx.judge is not None:
            judges = await self._judges(self.ctx.judge)
        return self._finish(judges, problem)

    async def _commands(self, workdir: str) -> None:
        logs: list[str] = []
        env = {"TEST_DIR": TESTS_MOUNT, "AS_AGENT": AS_AGENT, **self.task.verifier_env}
        for item in self.rubric.items:
            if item.check != "command":
                continue
            left = self._left()
            if left <= 1:
                self.results[item.id] = verdict(item, False, "not run: the verifier's "
                                                f"{self.ctx.timeout_s:.0f}s were used up")
                continue
            result, log, took = await run_command(
                self.sandbox, item, cwd=workdir, user=self.task.verifier_user, env=env,
                timeout_s=min(item.timeout_sec, left))
            self.results[item.id] = result
            self.command_s += took
            logs.append(log)
        if logs:
            self._write("verifier.log", "\n".join(logs))

    async def _capture(self) -> None:
        assert self.plan is not None
        site = self.files.root or (self.scratch / "empty")
        site.mkdir(parents=True, exist_ok=True)
        out = self.ctx.artifact_dir / "capture"
        timeout = max(1.0, min(plan_timeout(self.plan), self._left()))
        self.capture = await run_capture(self.plan, site, out, timeout)
        for shot in self.capture.screenshots:
            self._add(shot.name, shot, "screenshot")
        if self.capture.video is not None:
            self._add(self.capture.video.name, self.capture.video, "video")
        if self.capture.diagnostics_file is not None:
            self._add(self.capture.diagnostics_file.name, self.capture.diagnostics_file,
                      "verifier_output")

    def _inputs(self) -> judging.JudgeInputs:
        checks = [self.results[i.id] for i in self.rubric.items if i.id in self.results]
        inputs = judging.JudgeInputs(task_id=self.task.id, instruction=self.task.instruction,
                                     deliverables=self.files, checks=checks)
        if self.capture is not None:
            inputs.diagnostics = self.capture.diagnostics
            for shot in self.capture.screenshots:
                inputs.screenshots.append(JudgeImage(path=shot, media_type=judging.image_of(
                    shot.name) or "image/png"))
                inputs.screenshot_names.append((shot.name, shot.stat().st_size))
            if self.capture.video is not None:
                inputs.videos.append((self.capture.video.name, self.capture.video.stat().st_size))
        patterns = [p for i in self.rubric.judged("vision_judge") for p in i.inputs]
        videos: list[tuple[str, Path]] = []
        if self.capture is not None and self.capture.video is not None:
            videos.append((self.capture.video.name, self.capture.video))
        if patterns and self.files.root is not None:
            for rel in self.files.glob(patterns):
                media = judging.image_of(rel)
                if media is not None:
                    inputs.screenshots.append(JudgeImage(path=self.files.root / rel,
                                                         media_type=media))
                    inputs.screenshot_names.append((rel, self.files.size(rel)))
                elif frames.is_video(rel):  # a video deliverable: its frames, like the capture's
                    inputs.videos.append((rel, self.files.size(rel)))
                    videos.append((rel, self.files.root / rel))
        if self.rubric.judged("vision_judge"):
            out = self.ctx.artifact_dir / "frames"
            for n, (label, path) in enumerate(videos):
                got = frames.sample(path, out / str(n), label=label,
                                    timeout=max(1.0, min(frames.TIMEOUT_S, self._left())))
                inputs.frames.append(got)
                for f in got.paths:
                    self._add(f"frames/{n}/{f.name}", f, "screenshot")
        return inputs

    async def _judges(self, judge: JudgeClient) -> dict[str, judging.JudgeResult]:
        out: dict[str, judging.JudgeResult] = {}
        inputs = await asyncio.to_thread(self._inputs)  # ffmpeg, maybe its install
        kinds: tuple[judging.JudgeKind, ...] = ("text", "vision")
        for kind in kinds:
            items = self.rubric.judged("text_judge" if kind == "text" else "vision_judge")
            if not items:
                continue
            messages = judging.prompt(kind, items, inputs)
            self._write(f"judge_{kind}_prompt.json", _prompt_json(messages))
            replies: list[str] = []
            try:
                result = await judging.ask(judge, kind, messages, items,
                                           self.rubric.rubric.scoring, replies)
            finally:
                if replies:
                    self._write(f"judge_{kind}_reply.txt", "\n\n".join(
                        f"--- reply {n} ---\n{r}" for n, r in enumerate(replies, 1)))
            out[kind] = result
            for item in items:
                sat, reason = result.items[item.id]
                self.results[item.id] = verdict(item, sat, reason or f"{kind} judge")
        return out

    def _finish(self, judges: dict[str, judging.JudgeResult], problem: str | None) -> Verdict:
        rows = [self.results[i.id] for i in self.rubric.items]
        passed = sum(1 for r in rows if r.satisfied)
        rewards: dict[str, float] = {"checks_passed": float(passed), "checks_total": float(len(rows))}
        for kind, j in judges.items():
            rewards[kind] = float(j.score)
        if {"text", "vision"} <= judges.keys():
            rewards["passed_released"] = float(all(j.score >= judging.PASS_SCORE
                                                   for j in judges.values()))
        score: float | None = None
        if problem is None:
            if self.rubric.rubric.scoring == "judges":
                score = sum(j.score for j in judges.values()) / len(judges)
            else:
                total = sum(r.weight for r in rows)
                score = 10 * sum(r.weight for r in rows if r.satisfied) / total
            score = round(score, 6)
            rewards["score"] = score
        if self.files.root is None and self.files.problem != "not copied" and problem is None:
            problem = f"the working directory could not be copied: {self.files.problem}"
        judge_rows: dict[str, Any] = {k: {"score": j.score, "confidence": j.confidence,
                                          "reason": j.reason, "model": j.model}
                                      for k, j in judges.items()}
        report = {"scoring": self.rubric.rubric.scoring, "score": score,
                  "items": [r.row() for r in rows], "judges": judge_rows, "problem": problem}
        self._write("rubric.json", json.dumps(report, indent=1, ensure_ascii=False))
        extra: dict[str, Any] = {"rubric": [r.row() for r in rows],
                                 "rubric_failed": [r.row() for r in rows if not r.satisfied],
                                 "rubric_scoring": self.rubric.rubric.scoring}
        if judge_rows:
            extra["rubric_judges"] = judge_rows
        if self.capture is not None:
            diag = self.capture.diagnostics
            extra["capture"] = {"timed_out": bool(diag.get("timed_out")),
                                "errors": list(diag.get("errors") or [])[:20],
                                "screenshots": [p.name for p in self.capture.screenshots]}
        return Verdict(reward=None if score is None else round(score / 10, 6), rewards=rewards,
                       pass_threshold=self.task.pass_threshold, problem=problem,
                       artifacts=tuple(self.artifacts), command_s=self.command_s or None,
                       extra=extra)
