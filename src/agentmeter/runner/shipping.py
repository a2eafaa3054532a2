"""Tasks to nodes and artifacts back, without a shared file system (the Ray executor).

A task is shipped as one tar blob holding every host path its model names (the task directory,
and any file or directory outside it: a scenario's shared tests, Terminal-Bench's extra test
files), each root stored as ``r<i>/``; the task's model travels with its paths rewritten to
those names. A node unpacks a blob once into a cache directory named by the blob's sha256 and
points the task at it.

A try's artifacts come back the same way: the node's scratch run directory (the same relative
paths as the driver's ``store.run_dir``) as one tar blob, unpacked into the driver's run
directory. Unpacking uses tarfile's ``data`` filter: no absolute names, no ``..``, no links
leaving the destination, no device files (artifact names come from inside the sandbox).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import shutil
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from agentmeter.tasks.models import Task

#: how a shipped task names its roots inside the blob: ``r<i>/<relative path>``
_ROOT = "r{}"
M = TypeVar("M")


def _map_paths(obj: M, f: Callable[[Path], Path]) -> M:
    """``obj`` (a model, tuple, list, dict or value) with every Path ``p`` replaced by ``f(p)``."""
    out: Any
    if isinstance(obj, Path):
        out = f(obj)
    elif isinstance(obj, BaseModel):
        out = obj.model_copy(update={k: _map_paths(getattr(obj, k), f)
                                     for k in type(obj).model_fields})
    elif isinstance(obj, tuple):
        out = tuple(_map_paths(v, f) for v in obj)
    elif isinstance(obj, list):
        out = [_map_paths(v, f) for v in obj]
    elif isinstance(obj, dict):
        out = {k: _map_paths(v, f) for k, v in obj.items()}
    else:
        out = obj
    return out  # type: ignore[no-any-return]


def _paths(task: Task) -> list[Path]:
    found: list[Path] = []

    def seen(p: Path) -> Path:
        found.append(p)
        return p

    _map_paths(task, seen)
    return found


def _roots(task: Task) -> list[Path]:
    """The task directory first, then every named path outside it (outermost only)."""
    roots = [task.path.resolve()]
    for p in sorted({p.resolve() for p in _paths(task)}, key=lambda p: len(p.parts)):
        if not any(p == r or r in p.parents for r in roots):
            roots.append(p)
    return roots


def _under(p: Path, roots: list[Path]) -> tuple[int, Path]:
    p = p.resolve()
    for i, r in enumerate(roots):
        if p == r or r in p.parents:
            return i, p.relative_to(r)
    raise ValueError(f"{p} is under none of the task's roots")  # pragma: no cover - by _roots


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def pack_task(task: Task) -> tuple[bytes, str]:
    """(the task's tar blob, its model as JSON with its paths relative to the blob)."""
    roots = _roots(task)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i, root in enumerate(roots):
            if root.exists():
                tar.add(root, arcname=_ROOT.format(i), filter=_normalized)

    def relative(p: Path) -> Path:
        i, rel = _under(p, roots)
        return Path(_ROOT.format(i)) / rel

    return buf.getvalue(), _map_paths(task, relative).model_dump_json()


def blob_digest(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def unpack_task(blob: bytes, model_json: str, cache: Path) -> Task:
    """The shipped task, its files under ``cache/<sha256 of the blob>/`` (unpacked once per node:
    concurrent tasks of one node wait on a file lock; a half-unpacked directory is never used)."""
    digest = blob_digest(blob)
    dest = cache / digest
    if not (dest / ".complete").exists():
        cache.mkdir(parents=True, exist_ok=True)
        with (cache / f"{digest}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (dest / ".complete").exists():
                tmp = cache / f"{digest}.tmp-{os.getpid()}"
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir()
                with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
                    tar.extractall(tmp, filter="data")
                (tmp / ".complete").touch()
                shutil.rmtree(dest, ignore_errors=True)
                tmp.rename(dest)
    task = Task.model_validate_json(model_json)
    return _map_paths(task, lambda p: dest / p)


def pack_dir(directory: Path) -> bytes:
    """Everything under ``directory`` (regular files, directories, symlinks) as a tar blob;
    an empty blob when the directory does not exist. Members are made here from ``lstat``
    (owner 0, whole-second mtimes): ``tarfile.add`` looks every member's owner up in the
    password and group databases and writes a PAX header for each fractional mtime, which made
    packing a trivial try's ten artifacts ≈ 5 ms and its blob twice the size."""
    buf = io.BytesIO()
    if not directory.is_dir():
        return b""
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for child in sorted(os.listdir(directory)):
            _add(tar, directory / child, child)
    return buf.getvalue()


def _add(tar: tarfile.TarFile, path: Path, arcname: str) -> None:
    st = os.lstat(path)
    info = tarfile.TarInfo(arcname)
    info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
    if stat.S_ISREG(st.st_mode):
        info.size = st.st_size
        with path.open("rb") as f:
            tar.addfile(info, f)
    elif stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        for child in sorted(os.listdir(path)):
            _add(tar, path / child, f"{arcname}/{child}")
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
        tar.addfile(info)
    else:  # fifos, devices, sockets: as tarfile would (the driver refuses devices)
        tar.add(path, arcname=arcname, recursive=False, filter=_normalized)


def unpack_dir(blob: bytes, directory: Path) -> None:
    """Unpack a :func:`pack_dir` blob into ``directory`` (existing files of the same names are
    replaced); raises tarfile.TarError (or OSError) on a blob that is not one or has a member
    that could leave ``directory`` (what else it holds is kept). ``sandbox/untar.py``, not
    tarfile's ``data`` filter (beaten by CVE-2025-4517 on Python 3.11.7): the blob is made of
    an agent's artifacts."""
    from agentmeter.sandbox import untar
    from agentmeter.sandbox.archive import CopyTooLarge

    if not blob:
        return
    directory.mkdir(parents=True, exist_ok=True)
    try:
        # a member's cost is at most 8 times its header (a directory: untar.DIR_COST)
        res = untar.extract(io.BytesIO(blob), directory, what="artifacts blob",
                            max_bytes=8 * len(blob))
    except (untar.UntarError, CopyTooLarge) as e:
        raise tarfile.TarError(str(e)) from e
    if res.notes:
        raise tarfile.TarError("; ".join(res.notes[:5]))
