"""A trial's files: each recorded as an artifact of the try (names escaped and bounded), the
workdir's diff, and the task's artifacts copied out of the sandbox (bounded), with what was left
out noted on the trial. A part of ``TrialRunner`` (trial.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from agentmeter.records import ArtifactRecord, TrialRecord
from agentmeter.runner import hooks, sidecars
from agentmeter.runner.artifact_copy import copy_artifact
from agentmeter.sandbox import fsnames
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import SandboxError
from agentmeter.tasks import artifact_paths
from agentmeter.tasks.models import Task, TaskArtifact

if TYPE_CHECKING:
    from agentmeter.runner.trial import TrialContext

#: the most one task artifact may hold (its tar stream); a larger one is refused, not cut
ARTIFACT_MAX_BYTES = 64 << 20
#: the most collected files (``/logs/artifacts`` and the task's artifacts) one trial records
ARTIFACT_MAX_FILES = 2000
#: the longest artifact name stored (the artifacts table's ``name`` column); longer ones are
#: cut and end in a digest of the whole name
ARTIFACT_NAME_MAX = 300


class TrialArtifacts:
    """The artifact steps of ``TrialRunner``."""

    ctx: TrialContext
    rec: TrialRecord
    task: Task
    dir: Path

    def _artifact(self, name: str, path: Path, kind: str) -> None:
        """Record a file of the trial's directory. Names an agent made (collected artifacts,
        transcripts) are stored escaped (``fsnames.escape_path``: the relpath of such a file is
        its escaped form too; ``fsnames.unescape_name`` gives its bytes back)."""
        rel = fsnames.escape_path(
            path.relative_to(self.ctx.store.run_dir(self.ctx.run_id)).as_posix())
        name = fsnames.escape_path(name)
        if len(name) > ARTIFACT_NAME_MAX:
            digest = hashlib.sha256(name.encode()).hexdigest()[:16]
            name = f"{name[:ARTIFACT_NAME_MAX - 20]}...-{digest}"
        self.ctx.store.add_artifact(self.ctx.run_id, ArtifactRecord(
            trial_id=self.rec.id, name=name, kind=kind, relpath=rel,  # type: ignore[arg-type]
            size=path.stat().st_size), try_number=self.rec.try_number)

    def _note(self, key: str, lines: list[str]) -> None:
        """Add ``lines`` to the list ``rec.extra[key]`` (what the trial's record should say)."""
        if lines:
            self.rec.extra[key] = [*self.rec.extra.get(key, []), *lines]

    async def _save_diff(self, sandbox: Sandbox, snapshot: object, prefix: str = "") -> None:
        """The workdir's changes as the ``fs_diff.json`` artifact; call it once the agent's
        processes are gone. Its paths are escaped and its listing bounded (sandbox/fsnames.py);
        what the caps left out, or a diff that could not be taken, is noted on the trial."""
        try:
            diff = await sandbox.diff(snapshot)  # type: ignore[arg-type]
        except (SandboxError, OSError) as e:
            self._note("fs_diff_problems", [f"{prefix}fs_diff.json: {e}"])
            return
        self._note("fs_diff_problems", [f"{prefix}fs_diff.json: {n}" for n in diff.notes])
        path = self.dir / prefix / "fs_diff.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(diff.model_dump_json(indent=1))
        self._artifact(prefix + "fs_diff.json", path, "fs_diff")

    async def _collect_artifacts(self, sandbox: Sandbox,
                                 side: sidecars.Sidecars | None = None) -> None:
        """Copy the task's ``artifacts`` out (each bounded by ARTIFACT_MAX_BYTES) and record
        their files (at most ARTIFACT_MAX_FILES); a missing or oversized one is noted in the
        trial, not an error of it. The copies are the agent's trees: directories deeper than
        ``fsnames.CAPS.depth`` are cut from them (so restoring them for a separate verifier
        stays bounded) and their names are recorded escaped."""
        root = self.dir / "artifacts"
        problems: list[str] = []
        recorded = 0
        conventional = TaskArtifact(source=hooks.ARTIFACTS_DIR,
                                    destination=hooks.ARTIFACTS_DIR.strip("/"))
        for art in (conventional, *self.task.artifacts):
            dest = artifact_paths.inside(root, art.destination)
            if dest is None:  # the host is written as root: never outside artifacts/
                problems.append(f"{art.source}: destination {art.destination!r} is not inside "
                                "the artifacts directory: not collected")
                continue
            box = sandbox if art.service is None else side.box(art.service) if side else None
            if box is None:
                problems.append(f"{art.source}: service {art.service!r} is not running")
                continue
            try:  # a file or a directory: as the copied stream says (no sh of the image)
                notes = await copy_artifact(box, art.source, dest, exclude=art.exclude,
                                            max_bytes=ARTIFACT_MAX_BYTES)
                if notes is None:
                    if art is not conventional:
                        problems.append(f"{art.source}: no such file or directory")
                    continue
                problems += notes
            except (SandboxError, OSError) as e:
                problems.append(f"{art.source}: {e}")
                continue
            if dest.is_symlink() or not (dest.is_file() or dest.is_dir()):
                continue
            if dest.is_file():
                files = [dest]
            else:
                caps = fsnames.CAPS
                if fsnames.prune_depth(str(dest), caps.depth):
                    problems.append(f"{art.source}: what lies deeper than {caps.depth} levels "
                                    "was not kept")
                budget = fsnames.Budget(caps)
                files = [dest / rel for rel in fsnames.walk_files(str(dest), budget)]
                if budget.note:
                    problems.append(f"{art.source}: {budget.note}")
            for p in files:
                if recorded >= ARTIFACT_MAX_FILES:
                    problems.append(f"{art.source}: more than {ARTIFACT_MAX_FILES} files "
                                    "collected: the rest are kept but not recorded")
                    break
                self._artifact(p.relative_to(self.dir).as_posix(), p, "other")
                recorded += 1
        self._note("artifact_problems", problems)
