"""Copying one task artifact out of a sandbox into the trial's ``artifacts/``.

Whether the artifact is a directory or a file is what the copied tar stream's own top member
says (``copyout.CopyNotes.top_kind``): no program of the image (its ``sh``, run as root after
the agent) is asked."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from agentmeter.sandbox import fsnames, untar
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import SandboxError


async def copy_artifact(box: Sandbox, source: str, dest: Path, *, exclude: Sequence[str],
                        max_bytes: int) -> list[str] | None:
    """Copy ``source`` (as the agent: a path it replaced by a symlink reads nothing it could
    not) to ``dest``: a directory's content into the directory ``dest``, a file as the file
    ``dest``. Returns the copy's notes, None when ``source`` does not exist. Raises
    SandboxError or OSError when it cannot be copied."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".agentmeter-artifact-", dir=dest.parent))
    try:
        try:
            notes = await box.copy_out(source, scratch, exclude=exclude, max_bytes=max_bytes)
        except SandboxError as e:
            if "no such file or directory" in str(e).lower():
                return None
            raise
        kind = getattr(notes, "top_kind", None)
        if kind == "dir":
            untar.merge(scratch, dest)
        elif kind == "file":
            if dest.is_dir() and not dest.is_symlink():
                shutil.rmtree(dest)
            os.replace(scratch / PurePosixPath(source).name, dest)
        return list(notes)
    finally:
        fsnames.remove_tree(scratch)
