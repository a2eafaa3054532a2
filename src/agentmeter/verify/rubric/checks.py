"""The rubric's deterministic checks: ``command`` (in the sandbox), ``file`` and ``capture``.

A ``command`` runs as the task's verifier user (root by default) in the working directory, with
``TEST_DIR=/tests`` and ``AS_AGENT`` (run agent-written code through it, never as root), bounded
by its ``timeout_sec`` and what is left of the verifier's time; exit 0 = satisfied. ``file`` and
``capture`` checks read the host copy of the working directory (:class:`Deliverables`, taken
before ``/tests`` exists in the sandbox; links that leave it are not followed) and the capture's
``eval-js`` labels. Reasons never quote what the rubric expects: they become the agent's feedback.
"""

from __future__ import annotations

import filecmp
import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import harness_bash
from agentmeter.verify.rubric.config import RubricItem

#: the most of one file a check or a judge reads
FILE_MAX_BYTES = 1 << 20
#: the most of a command's output kept in the log (per stream) and in a reason
OUTPUT_LIMIT = 64 << 10
REASON_TAIL = 240


@dataclass(frozen=True)
class ItemVerdict:
    """One item's outcome (``extra["rubric"]`` rows)."""

    id: str
    description: str
    check: str
    weight: float
    satisfied: bool
    reason: str

    def row(self) -> dict[str, Any]:
        return {"id": self.id, "description": self.description, "check": self.check,
                "satisfied": self.satisfied, "reason": self.reason, "weight": self.weight}


def verdict(item: RubricItem, satisfied: bool, reason: str) -> ItemVerdict:
    return ItemVerdict(item.id, item.description, item.check, item.weight, satisfied, reason)


class Deliverables:
    """The host copy of the agent's working directory (``root``), or why there is none.

    ``seeds``: the directories the task itself put in the working directory (its steps'
    ``workdir/``, e.g. AgencyBench's released assets): an entry identical to a seed's (a file with
    the same bytes, a directory that is there too) was not made by the agent
    (:meth:`agent_made`)."""

    def __init__(self, root: Path | None, problem: str | None = None,
                 seeds: tuple[Path, ...] = ()) -> None:
        self.root, self.problem, self.seeds = root, problem, seeds

    def _inside(self, rel: str) -> Path | None:
        if self.root is None:
            return None
        base = self.root.resolve()
        path = (self.root / rel).resolve()
        if path != base and base not in path.parents:
            return None  # a link out of the copy
        return path

    def read(self, rel: str, limit: int = FILE_MAX_BYTES) -> bytes | None:
        """The first ``limit`` bytes of the regular file ``rel``, or None."""
        path = self._inside(rel)
        if path is None or not path.is_file():
            return None
        with path.open("rb") as f:
            return f.read(limit)

    def files(self) -> list[str]:
        """Every regular file, relative, sorted (links followed only inside the copy)."""
        if self.root is None:
            return []
        out = []
        for p in sorted(self.root.rglob("*")):
            rel = p.relative_to(self.root).as_posix()
            if self._inside(rel) is not None and p.is_file():
                out.append(rel)
        return out

    def directories(self) -> list[str]:
        """Every directory, relative, sorted (links not followed)."""
        if self.root is None:
            return []
        return [p.relative_to(self.root).as_posix() for p in sorted(self.root.rglob("*"))
                if p.is_dir() and not p.is_symlink()]

    def is_dir(self, rel: str) -> bool:
        path = self._inside(rel)
        return path is not None and path.is_dir()

    def _seeded(self, rel: str, directory: bool) -> bool:
        for seed in self.seeds:
            other = seed / rel
            if directory and other.is_dir():
                return True
            mine = self._inside(rel)
            if not directory and mine is not None and other.is_file() and \
                    filecmp.cmp(mine, other, shallow=False):
                return True
        return False

    def agent_made(self) -> list[str]:
        """Files and directories (``name/``) the agent made or changed: not as a seed has
        them."""
        out = [f"{d}/" for d in self.directories() if not self._seeded(d, True)]
        out += [f for f in self.files() if not self._seeded(f, False)]
        return sorted(out)

    def glob(self, patterns: list[str], *, hidden: bool = True) -> list[str]:
        """Files matching any of ``patterns`` (fnmatch on the relative path; ``**/`` also
        matches nothing); all files when there are no patterns, hidden ones too if asked."""
        files = self.files()
        if not patterns:
            return [f for f in files if hidden or not any(p.startswith(".") for p in f.split("/"))]
        alts = {p for pat in patterns for p in (pat, pat.replace("**/", ""))}
        return [f for f in files if any(fnmatch.fnmatchcase(f, p) for p in alts)]

    def size(self, rel: str) -> int:
        path = self._inside(rel)
        return path.stat().st_size if path is not None and path.is_file() else 0


async def run_command(sandbox: Sandbox, item: RubricItem, *, cwd: str, user: str,
                      env: dict[str, str], timeout_s: float) -> tuple[ItemVerdict, str, float]:
    """The command check's verdict, its log text and its duration."""
    assert item.command is not None
    r = await sandbox.exec(harness_bash(item.command), cwd=cwd, user=user, env=env,
                           timeout=timeout_s, output_limit=OUTPUT_LIMIT)
    log = (f"$ {item.command}\n--- item {item.id}: exit {r.exit_code}"
           f"{' (timed out)' if r.timed_out else ''} in {r.duration_s:.1f}s\n"
           f"--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}\n")
    if r.timed_out:
        reason = f"the check timed out after {timeout_s:.0f}s"
    elif r.exit_code == 0:
        reason = "exit 0"
    else:
        tail = (r.stderr.strip() or r.stdout.strip())[-REASON_TAIL:]
        reason = f"exit {r.exit_code}" + (f": {tail}" if tail else "")
    return verdict(item, r.ok, reason), log, r.duration_s


def check_file(item: RubricItem, files: Deliverables) -> ItemVerdict:
    assert item.path is not None
    if files.root is None:
        return verdict(item, False, f"the working directory could not be read: {files.problem}")
    data = files.read(item.path)
    if data is None:
        return verdict(item, False, f"{item.path}: no such file")
    text = data.decode("utf-8", errors="replace")
    folded = text.casefold()
    missing = [n for n in item.needles if n.casefold() not in folded]
    if missing:
        return verdict(item, False, f"{item.path} lacks {len(missing)} of the "
                       f"{len(item.needles)} required texts")
    if item.matches is not None and re.search(item.matches, text, re.M) is None:
        return verdict(item, False, f"{item.path} does not match the required pattern")
    return verdict(item, True, f"{item.path}: as required")


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 120 else text[:117] + "..."


def check_capture(item: RubricItem, labels: dict[str, Any] | None) -> ItemVerdict:
    assert item.label is not None
    if labels is None:
        return verdict(item, False, "no capture was made")
    if item.label not in labels:
        return verdict(item, False, f"the capture recorded no {item.label!r}")
    value = labels[item.label]
    if "equals" in item.model_fields_set:
        ok = value == item.equals
    else:
        assert isinstance(item.contains, str)
        hay = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        ok = item.contains in hay
    return verdict(item, ok, f"{item.label} = {_shown(value)}"
                   + ("" if ok else " (not what the criterion needs)"))
