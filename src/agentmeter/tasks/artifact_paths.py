"""Where a task's artifact lands on the host: a relative path strictly inside the trial's
``artifacts/`` directory. The runner copies it out as root, so a destination that is absolute,
has a ``..`` component or is empty would write (or, for a separate verifier, read) anywhere on
the host. Loaders refuse such a destination (``destination_problem``); the runner checks again
where it uses one (``inside``), whatever built the task."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from agentmeter.paths import within


def destination_problem(destination: str) -> str | None:
    """Why ``destination`` cannot be an artifact's destination, or None when it can."""
    if "\0" in destination:
        return f"{destination!r}: a destination has no NUL character"
    if destination.startswith("/"):
        return f"{destination!r}: a destination is a relative path, not an absolute one"
    parts = PurePosixPath(destination).parts
    if ".." in parts:
        return f"{destination!r}: a destination has no '..' component"
    if not parts:
        return f"{destination!r}: a destination names a path below the artifacts directory"
    return None


def inside(root: Path, destination: str) -> Path | None:
    """``root / destination`` when it resolves (links followed) strictly inside ``root``,
    else None."""
    if destination_problem(destination) is not None:
        return None
    path = root / destination
    top = root.resolve()
    resolved = path.resolve()
    if resolved == top or not resolved.is_relative_to(top) or not within(path, top):
        return None
    return path
