"""Harbor's dataset registry: ``agentmeter run -d NAME@VERSION`` and ``tasks list -d``.

A registry is Harbor's ``registry.json``: a JSON list of datasets, each ``name``, ``version``,
``description`` and ``tasks``; a task is ``name``, ``git_url``, ``git_commit_id`` (optional) and
``path`` (its directory inside the repository). ``NAME@VERSION`` picks a version; ``NAME`` alone
picks as Harbor does: ``head`` if the dataset has it, else the highest PEP 440 version, else the
lexically last.

Each task is fetched with git into a content-addressed cache under ``<cache>/datasets``
(gitfetch.py, which also checks what the registry says of it: URL, commit, path, the checked-out
tree). The registry read from a URL is kept in the cache too, and used (with a notice) when the
URL cannot be reached; a registry is untrusted input, its size bounded. The cached task
directories then load as a local suite would (``load_task_dir``): a task that cannot be fetched
or loaded is skipped with one reason naming the dataset and the task, and the others run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ValidationError

from agentmeter.notices import notice
from agentmeter.paths import cache_dir, write_atomic
from agentmeter.tasks.errors import TaskError, TaskProblem
from agentmeter.tasks.gitfetch import FetchError, RegistryTask, fetch_task
from agentmeter.tasks.models import Task
from agentmeter.tasks.suite import SkippedTask, Suite, duplicate_problems, load_or_skip

#: what tests and callers import from here (the fetching lives in gitfetch.py)
__all__ = ["DEFAULT_REGISTRY_URL", "DatasetError", "DatasetSpec", "FetchError", "RegistryTask",
           "dataset_cache_dir", "fetch_task", "find_dataset", "load_dataset", "read_registry",
           "resolve_version"]

#: Harbor's own registry (``--registry`` overrides it)
DEFAULT_REGISTRY_URL = "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json"
MAX_REGISTRY_BYTES = 32 << 20
REGISTRY_TIMEOUT_S = 30.0


class DatasetError(Exception):
    """The dataset cannot be had at all (bad registry, unknown dataset or version)."""


class DatasetSpec(BaseModel):
    """One dataset version of the registry (Harbor's ``metrics`` are not used here)."""

    name: str
    version: str
    description: str = ""
    tasks: list[RegistryTask]

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


def dataset_cache_dir() -> Path:
    """Where fetched tasks and registries are kept: ``<cache>/datasets``."""
    return cache_dir() / "datasets"


# -- the registry ---------------------------------------------------------------------------


def resolve_version(versions: Sequence[str]) -> str:
    """Harbor's choice when no version is given: ``head``, else the highest PEP 440 version,
    else the lexically last."""
    if not versions:
        raise ValueError("no versions")
    if "head" in versions:
        return "head"
    parsed: list[tuple[Version, str]] = []
    for v in versions:
        with contextlib.suppress(InvalidVersion):
            parsed.append((Version(v), v))
    if parsed:
        return max(parsed, key=lambda p: p[0])[1]
    return max(versions)


def _is_url(source: str) -> bool:
    return urllib.parse.urlsplit(source).scheme in ("http", "https")


def _read_bounded(stream: BinaryIO, what: str) -> bytes:
    data = stream.read(MAX_REGISTRY_BYTES + 1)
    if len(data) > MAX_REGISTRY_BYTES:
        raise DatasetError(f"registry {what}: larger than {MAX_REGISTRY_BYTES >> 20} MiB")
    return data


def read_registry(source: str, cache: Path) -> list[object]:
    """The registry's rows: from an ``http(s)`` URL (kept in the cache; the kept copy is used,
    with a notice, when the URL cannot be reached), a ``file://`` URL or a path."""
    if _is_url(source):
        kept = cache / "registries" / (hashlib.sha256(source.encode()).hexdigest()[:32] + ".json")
        try:
            with urllib.request.urlopen(source, timeout=REGISTRY_TIMEOUT_S) as response:
                data = _read_bounded(response, source)
            write_atomic(kept, data)
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            if not kept.is_file():
                raise DatasetError(f"registry {source}: cannot be read ({e}) and no copy of it "
                                   "is cached") from None
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(kept.stat().st_mtime))
            notice(f"registry {source}: cannot be read ({e}); using the copy read {when}")
            data = kept.read_bytes()
    else:
        path = Path(urllib.parse.urlsplit(source).path if source.startswith("file://")
                    else source).expanduser()
        try:
            with path.open("rb") as f:
                data = _read_bounded(f, str(path))
        except OSError as e:
            raise DatasetError(f"registry {path}: {e.strerror or e}") from None
    try:
        rows = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"registry {source}: not JSON ({e})") from None
    if not isinstance(rows, list):
        raise DatasetError(f"registry {source}: expected a JSON list of datasets")
    return rows


def find_dataset(rows: Sequence[object], ref: str, source: str) -> DatasetSpec:
    """The dataset ``NAME@VERSION`` (or ``NAME``: Harbor's version choice) of the registry."""
    name, sep, version = ref.partition("@")
    if not name or (sep and not version):
        raise DatasetError(f"dataset {ref!r}: expected NAME or NAME@VERSION")
    mine = [r for r in rows if isinstance(r, dict) and r.get("name") == name]
    versions = [str(r.get("version")) for r in mine]
    if not mine:
        raise DatasetError(f"dataset {name!r} is not in registry {source}")
    if not sep:
        version = resolve_version(versions)
    if version not in versions:
        raise DatasetError(f"dataset {name!r} has no version {version!r} in registry {source} "
                           f"(versions: {', '.join(sorted(versions))})")
    row = mine[versions.index(version)]
    try:
        return DatasetSpec.model_validate(row)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise DatasetError(f"dataset {name}@{version} in registry {source}: {where}: "
                           f"{first['msg']}") from None


# -- the suite ------------------------------------------------------------------------------


def load_dataset(ref: str, registry: str | None = None, strict: bool = False,
                 cache: Path | None = None) -> Suite:
    """The dataset as a suite: each task fetched (or found in the cache) and loaded; a task that
    cannot be fetched or loaded is skipped with its reason (unless ``strict``)."""
    source = registry or DEFAULT_REGISTRY_URL
    cache = cache or dataset_cache_dir()
    spec = find_dataset(read_registry(source, cache), ref, source)
    where = Path(f"{spec.ref}")
    tasks: list[Task] = []
    skipped: list[SkippedTask] = []
    problems: list[TaskProblem] = []
    for entry in spec.tasks:
        label = f"dataset {spec.ref}: task {entry.name}"
        try:
            if _is_url(source) and (entry.git_url or "").lower().startswith("file:"):
                # a registry from the network names no repository of this host (a private
                # checkout's task-shaped directory would be copied into the agent's sandbox)
                raise FetchError(f"git_url {entry.git_url!r} refused: a local repository, named "
                                 "by a registry read from the network")
            directory = fetch_task(entry, cache)
        except (FetchError, OSError) as e:
            problem = TaskProblem(where, f"task {entry.name}: {e}")
            if strict:
                problems.append(problem)
            else:
                skipped.append(SkippedTask(id=PurePosixPath(entry.path).name or entry.name,
                                           path=where, problems=(f"{label}: {e}",)))
            continue
        load_or_skip(directory, strict, tasks, problems, skipped)
    problems.extend(duplicate_problems(tasks, where))
    if not tasks and not problems:
        problems.append(TaskProblem(where, "no task of the dataset can be had" if skipped
                                    else "the dataset has no tasks"))
        problems.extend(TaskProblem(where, f"skipped: {k.reason}") for k in skipped)
    if problems:
        raise TaskError(problems)
    return Suite(name=spec.name, path=cache, version=spec.version,
                 description=spec.description or None,
                 tasks=tuple(sorted(tasks, key=lambda t: t.id)), skipped=tuple(skipped))
