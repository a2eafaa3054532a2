"""The ``difftest`` verifier kind: CLI-Tool-Bench's black-box differential testing.

Staged at the sandbox's start, root-only with the task's tests: the engine (``engine.py``), the
task's ``[difftest]`` section as JSON and its frozen cases. At verification the engine runs as
root inside the sandbox (network as the task says, by default none): it installs what the agent
built and runs every case against the oracle and the candidate (see engine.py). Its raw results
are read here, on the host, with size caps; comparison, the SM judge (through the harness's
gateway, metered as evaluation cost) and the reward keys happen here, so nothing the candidate
does inside the sandbox can write its own verdict.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import TYPE_CHECKING

from agentmeter.records import CaseOutcome
from agentmeter.sandbox.archive import CopyTooLarge
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import HARNESS_ENV, SandboxError
from agentmeter.verify.command import (
    TESTS_MOUNT,
    VERIFIER_LOGS_DIR,
    harness_program,
    stage_verifier,
    unstage_verifier,
)
from agentmeter.verify.difftest import compare, entrypoint
from agentmeter.verify.difftest.config import Case, DifftestConfig, class_keys, read_cases
from agentmeter.verify.difftest.judging import judge_outcomes
from agentmeter.verify.protocol import (
    SandboxNeeds,
    Verdict,
    VerificationError,
    VerifierArtifact,
    VerifierContext,
)

if TYPE_CHECKING:
    from agentmeter.tasks.models import Task

ENGINE_DIR = ".agentmeter-difftest"
OUT_DIR = f"{VERIFIER_LOGS_DIR}/difftest"
#: the most of the engine's per-case results that is read back (each stream is capped inside)
RESULTS_MAX_BYTES = 256 << 20


def engine_files() -> dict[str, bytes]:
    pkg = resources.files("agentmeter.verify.difftest")
    return {name: (pkg / name).read_bytes()
            for name in ("engine.py", "engine_main.py", "engine_install.py", "engine_proc.py")}


def engine_config(cfg: DifftestConfig, workspace: str) -> bytes:
    data = cfg.model_dump(mode="json")
    data["workspace"] = workspace
    return json.dumps(data).encode()


def config_of(task: Task) -> DifftestConfig:
    if task.difftest is None:
        raise VerificationError(f"task {task.id} has verifier kind 'difftest' but no [difftest]")
    return task.difftest


def _staged(task: Task, sandbox: Sandbox) -> dict[str, bytes]:
    """The engine's files; the workspace is the task's ``workspace``, else the sandbox's
    working directory (where the agent worked)."""
    cfg = config_of(task)
    files = {f"{ENGINE_DIR}/{k}": v for k, v in engine_files().items()}
    files[f"{ENGINE_DIR}/config.json"] = engine_config(cfg, cfg.workspace or sandbox.workdir)
    return files


async def _read(sandbox: Sandbox, path: str, max_bytes: int) -> bytes | None:
    try:
        return await sandbox.read_file(path, max_bytes=max_bytes, user="root")  # the engine's
    except CopyTooLarge as e:
        raise VerificationError(f"the engine's {path} is over {max_bytes} bytes: {e}") from e
    except SandboxError:
        return None


class DifftestVerifier:
    """Differential testing of a CLI the agent built against the task's oracle."""

    def sandbox_needs(self, task: Task) -> SandboxNeeds:
        return SandboxNeeds()

    async def stage(self, task: Task, sandbox: Sandbox) -> None:
        await stage_verifier(task, sandbox, _staged(task, sandbox))

    async def verify(self, task: Task, sandbox: Sandbox, ctx: VerifierContext) -> Verdict:
        cfg = config_of(task)
        cases = read_cases(task.tests_dir / cfg.cases)
        await unstage_verifier(task, sandbox, extra=_staged(task, sandbox))
        engine = f"{TESTS_MOUNT}/{ENGINE_DIR}"
        # root, after the agent: no PYTHONPATH/HOME site of the image's (-I), and the programs
        # it runs as root (chown, chmod) looked up on HARNESS_PATH, not on a PATH the agent writes
        r = await sandbox.exec(
            harness_program("python3", "-I", f"{engine}/engine.py", "--config",
                            f"{engine}/config.json", "--cases", f"{TESTS_MOUNT}/{cfg.cases}",
                            "--out", OUT_DIR),
            user="root", cwd="/", env=HARNESS_ENV, timeout=ctx.timeout_s)
        log = ctx.artifact_dir / "verifier.log"
        log.write_text(f"$ difftest engine ({len(cases)} cases)\n--- exit {r.exit_code}"
                       f"{' (timed out)' if r.timed_out else ''}\n--- stdout\n{r.stdout}\n"
                       f"--- stderr\n{r.stderr}\n")
        artifacts = [ctx.add_artifact("verifier.log", log, "verifier_output")]
        if r.exit_code == 127 or "python3: not found" in r.stderr:
            raise VerificationError("the difftest engine needs python3 in the task's environment")
        if r.exit_code in (2, 3):
            raise VerificationError(f"difftest engine: {r.stderr.strip()[-500:]}")
        build_raw = await _read(sandbox, f"{OUT_DIR}/build.json", 1 << 20)
        if build_raw is None:
            raise VerificationError(f"the difftest engine wrote no build.json (exit {r.exit_code}):"
                                    f" {r.stderr.strip()[-300:]}")
        build = compare.BuildRecord.model_validate_json(build_raw)
        raw = await _read(sandbox, f"{OUT_DIR}/cases.jsonl", RESULTS_MAX_BYTES) or b""
        records, unreadable = compare.parse_records(raw.decode("utf-8", errors="replace"))
        return await self._verdict(task, cfg, cases, build, records, unreadable, ctx, artifacts,
                                   r.duration_s, r.timed_out)

    async def _verdict(self, task: Task, cfg: DifftestConfig, cases: list[Case],
                       build: compare.BuildRecord, records: dict[str, compare.CaseRecord],
                       unreadable: int, ctx: VerifierContext,
                       artifacts: list[VerifierArtifact], duration_s: float,
                       timed_out: bool) -> Verdict:
        keys = class_keys(cases)
        results = compare.outcomes(cases, records, cfg, keys, built=build.build)
        judged = ctx.judge is not None
        if ctx.judge is not None and build.build:
            results = await judge_outcomes(results, cfg, ctx.judge)
        named, score = compare.rewards(build, results, judged)
        named.update(compare.ms_per_command(records))
        metric = "sm" if judged else "fm"
        reward = score.sm if judged else score.fm
        problems: list[str] = []
        if not build.build:  # a candidate failure: Build = 0, no case is a framework error
            problems.append(f"the candidate did not build ({build_cause(build)}); "
                            "see install.log")
        if timed_out:
            problems.append(f"the difftest engine timed out after {ctx.timeout_s:.0f}s; "
                            f"{int(named['cases_not_run'])} cases did not run")
        if unreadable:
            problems.append(f"{unreadable} unreadable result lines")
        if reward is None and build.build:
            problems.append("no case was valid for scoring" if not named.get("cases_valid")
                            else "a judge verdict is missing")
        artifacts += self._write_artifacts(ctx, keys, build, results)
        extra: dict[str, object] = {
            "reward_metric": metric, "difftest_classes": {v: k for k, v in keys.items()},
            "entry_point": entry_point_report(cfg.cli_name, build)}
        if build.structure:
            extra["structure"] = build.structure
        oracle_loc = task.metadata_extra.get("oracle_loc")
        if isinstance(oracle_loc, int) and not isinstance(oracle_loc, bool) and oracle_loc >= 0:
            extra["oracle_loc"] = oracle_loc  # the complexity analysis's x (paper RQ2)
        if not build.build:
            extra["build_cause"] = build_cause(build)
        return Verdict(reward=reward, rewards=named, pass_threshold=task.pass_threshold,
                       problem="; ".join(problems) or None, artifacts=tuple(artifacts),
                       command_s=duration_s, extra=extra)

    @staticmethod
    def _write_artifacts(ctx: VerifierContext, keys: dict[str, str], build: compare.BuildRecord,
                         results: list[CaseOutcome]) -> list[VerifierArtifact]:
        out = []
        cases_path = ctx.artifact_dir / "difftest_cases.jsonl"
        with cases_path.open("w", encoding="utf-8") as f:
            for o in results:
                row = o.model_dump()
                for k in ("oracle_stdout", "candidate_stdout"):
                    row[k] = row[k][:compare.SHOWN_CHARS]
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        out.append(ctx.add_artifact("difftest_cases.jsonl", cases_path, "verifier_output"))
        classes = ctx.artifact_dir / "classes.json"
        classes.write_text(json.dumps({v: k for k, v in keys.items()}, indent=1,
                                      ensure_ascii=False))
        out.append(ctx.add_artifact("classes.json", classes, "verifier_output"))
        install = ctx.artifact_dir / "install.log"
        install.write_text(f"install exit {build.install_exit}"
                           f"{' (timed out)' if build.timed_out else ''}; command resolved: "
                           f"{build.resolved}; new executables: {build.bin_new}\n{build.log}")
        out.append(ctx.add_artifact("install.log", install, "verifier_output"))
        return out


def build_cause(build: compare.BuildRecord) -> str:
    """Why the candidate did not build, in one line, from the install log: a timeout, a
    missing command, or the log's last error-looking line (the whole log is install.log)."""
    if build.timed_out:
        return f"the install timed out after {build.duration_s or 0:.0f}s"
    if build.install_exit == 0 and not build.resolved:
        new = ", ".join(build.bin_new) or "none"
        return f"the install succeeded but did not install the command (new executables: {new})"
    lines = [ln.strip() for ln in build.log.splitlines() if ln.strip()]
    marks = ("error", "fatal", "cannot", "could not", "not found", "no such", "failed",
             "missing", "no matching")
    hits = [ln for ln in lines if any(m in ln.lower() for m in marks)]
    tail = (hits or lines or ["(empty install log)"])[-1]
    return f"install exit {build.install_exit}: {tail[:300]}"


def entry_point_report(expected: str, build: compare.BuildRecord) -> dict[str, object]:
    """The entry-point diagnostic (spec §2.1): which new executable the install produced that
    best matches the expected name (exact, case, acronym, Levenshtein) and whether its
    ``--help`` works. Not scored: a wrong name stays a wrong name, this says why Exec is 0."""
    picked = entrypoint.choose(build.bin_new, expected)
    found, rule = picked if picked is not None else (None, None)
    help_ = build.help.get(found or "", {})
    return {"expected": expected, "found": found, "rule": rule,
            "help_ok": bool(help_) and entrypoint.help_ok(help_.get("exit"),
                                                           str(help_.get("text", "")))}
