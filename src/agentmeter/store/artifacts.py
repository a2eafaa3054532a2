"""Where a run's artifacts live on disk.

``<runs_dir>/runs/<run_id>/trials/<safe trial name>/`` — the trial id ('{config}:{task}:{n}')
is turned into a portable directory name; if anything had to be replaced a short hash of the
original id is appended, so two different ids never share a directory.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

DB_FILENAME = "agentmeter.db"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: run ids become directory names as they are
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def safe_trial_name(trial_id: str, try_number: int = 0) -> str:
    safe = _UNSAFE.sub("_", trial_id)[:120].strip(".") or "trial"
    if safe != trial_id:
        safe += "-" + hashlib.sha256(trial_id.encode()).hexdigest()[:8]
    return safe if try_number == 0 else f"{safe}.try{try_number}"


def run_dir(runs_dir: Path, run_id: str) -> Path:
    return runs_dir / "runs" / run_id


def trial_dir(runs_dir: Path, run_id: str, trial_id: str, try_number: int = 0) -> Path:
    return run_dir(runs_dir, run_id) / "trials" / safe_trial_name(trial_id, try_number)


def artifact_file(run_dir: Path, relpath: str) -> Path | None:
    """``run_dir / relpath`` when it lies inside the run directory (links followed), else None:
    a store or run directory from elsewhere (a copied database, a run directory someone
    edited) may name any host file by an absolute or ``..`` relpath or a link, which a report
    would embed."""
    from agentmeter.paths import within

    path = run_dir / relpath
    return path if within(path, run_dir) else None
