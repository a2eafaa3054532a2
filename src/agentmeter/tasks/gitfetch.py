"""Fetching one task of a dataset registry (datasets.py) with git, into a content-addressed cache.

Each task is fetched with git (shallow, of that one commit, checked out sparsely to its path) into
``<cache>/tasks/<sha256 of url, commit, path>/<task dir>``, staged in a temporary directory and
renamed into place, so an entry is complete or absent. A pinned task found in the cache touches
no network. A task without a commit follows the repository's default branch (as Harbor: it is
fetched again each time, its commit resolved first); when the repository cannot be reached, the
copy fetched last is used, with a notice.

The registry and the repositories are untrusted input: URLs are ``http``, ``https``, ``git`` or
``file`` only (also enforced by git itself, ``GIT_ALLOW_PROTOCOL``), commits and refs cannot be
options, task paths are relative and stay inside the checkout (no ``..``, no component that is a
symlink, no symlink in the task leading out of it), git runs with neither the system's nor the
user's configuration and with hooks off, and fetch and task sizes are bounded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict

from agentmeter.notices import notice
from agentmeter.paths import realpath, within, write_atomic
from agentmeter.tasks.suite import TASK_ID_PATTERN

#: the schemes a registry's ``git_url`` may use (git's ``ext::``, ``fd::``, ssh and local paths not)
GIT_PROTOCOLS = ("http", "https", "git", "file")
#: what one fetch may write (the shallow pack and its checkout) before git is stopped
MAX_FETCH_BYTES = 2 << 30
#: one task directory, as cached
MAX_TASK_BYTES = 512 << 20
MAX_TASK_FILES = 20_000
GIT_TIMEOUT_S = 600.0
_FULL_SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
#: a branch or tag name a registry may give as ``git_commit_id`` (never an option, never ``..``)
_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


class RegistryTask(BaseModel):
    """One task of a dataset, as Harbor's registry gives it."""

    model_config = ConfigDict(frozen=True)

    name: str
    git_url: str | None = None
    git_commit_id: str | None = None
    path: str


class FetchError(Exception):
    """One task could not be fetched; the message says why."""


# -- checking what the registry says --------------------------------------------------------


def check_git_url(url: str) -> None:
    """Only ``http``, ``https``, ``git`` and ``file`` URLs (never git's ``ext::`` helper, which
    runs a command, ``fd::``, ssh's options, or something git would read as an option)."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in GIT_PROTOCOLS or "::" in url.split("/", 1)[0] or url.startswith("-"):
        raise FetchError(f"git_url {url!r} refused: only {', '.join(GIT_PROTOCOLS)} URLs")
    if any(c in url for c in "\n\r\0"):
        raise FetchError(f"git_url {url!r} refused: control characters")


def check_commit(commit: str | None) -> None:
    if commit is None or _FULL_SHA.match(commit):
        return
    if not _REF.match(commit) or ".." in commit:
        raise FetchError(f"git_commit_id {commit!r} refused: neither a full commit id nor a "
                         "branch or tag name")


def task_path_parts(path: str) -> tuple[str, ...]:
    """The task's path inside the repository, checked: relative, no ``..``, no ``.git``."""
    if not path or "\\" in path or "\0" in path or path.startswith("/"):
        raise FetchError(f"path {path!r} refused: not a relative path inside the repository")
    parts = tuple(p for p in PurePosixPath(path).parts if p != ".")
    if not parts or any(p == ".." for p in parts):
        raise FetchError(f"path {path!r} refused: it leaves the repository")
    if any(p.lower() == ".git" for p in parts):
        raise FetchError(f"path {path!r} refused: inside .git")
    if not TASK_ID_PATTERN.match(parts[-1]):
        raise FetchError(f"path {path!r} refused: its last part is the task id and may only "
                         "contain letters, digits, '.', '_' and '-'")
    return parts


def _inside(child: Path, root: Path) -> bool:
    return child == root or root in child.parents


def check_checked_out(checkout: Path, parts: tuple[str, ...]) -> Path:
    """The task directory of a checkout: no component of its path is a symlink, and it is a
    directory inside the checkout."""
    current = checkout
    for part in parts:
        current = current / part
        if current.is_symlink():
            link = "/".join(parts[:parts.index(part) + 1])
            raise FetchError(f"path {'/'.join(parts)!r} refused: {link!r} is a symlink in the "
                             "repository")
    if not current.is_dir():
        raise FetchError(f"path {'/'.join(parts)!r}: no such directory at that commit")
    if not within(current, checkout):
        raise FetchError(f"path {'/'.join(parts)!r} refused: it leaves the checkout")
    return current


def check_task_tree(task_dir: Path) -> None:
    """Every symlink of the task stays inside it; files are regular; sizes are bounded."""
    root = task_dir.resolve()
    total = files = 0
    for dirpath, dirnames, filenames in os.walk(task_dir):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(task_dir)
            if p.is_symlink():
                target = realpath(p)
                if target is None or not _inside(target, root):
                    raise FetchError(f"{rel}: a symlink leading out of the task "
                                     f"({os.readlink(p)!r})")
                continue
            if name in filenames:
                st = p.lstat()
                files += 1
                total += st.st_size
        if files > MAX_TASK_FILES or total > MAX_TASK_BYTES:
            raise FetchError(f"the task has more than {MAX_TASK_FILES} files or "
                             f"{MAX_TASK_BYTES >> 20} MiB")


# -- git ------------------------------------------------------------------------------------


def git_env(home: Path) -> dict[str, str]:
    """An environment in which git reads no configuration but ours and speaks only the allowed
    protocols (proxies are kept: they are how a host reaches out)."""
    keep = {k: v for k, v in os.environ.items()
            if k.lower() in ("http_proxy", "https_proxy", "no_proxy", "all_proxy")}
    return {**keep,
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ALLOW_PROTOCOL": ":".join(GIT_PROTOCOLS), "GIT_PROTOCOL_FROM_USER": "0",
            "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "SSH_ASKPASS": "true",
            "GIT_LFS_SKIP_SMUDGE": "1", "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_HTTP_LOW_SPEED_LIMIT": "1000", "GIT_HTTP_LOW_SPEED_TIME": "60"}


#: before every command: no hooks, no fsmonitor, no submodules, no credential helpers
GIT_SAFE_CONFIG = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
                   "-c", "submodule.recurse=false", "-c", "credential.helper=",
                   "-c", "advice.detachedHead=false",
                   "-c", "core.symlinks=true", "-c", "safe.directory=")


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            with contextlib.suppress(OSError):
                total += (Path(dirpath) / name).lstat().st_size
    return total


def run_git(args: Sequence[str], cwd: Path, home: Path,
            limit_bytes: int = MAX_FETCH_BYTES) -> str:
    """Run git; stop it when it outlives GIT_TIMEOUT_S or ``cwd`` grows past ``limit_bytes``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as errs:
        proc = subprocess.Popen(["git", *GIT_SAFE_CONFIG, *args], cwd=cwd, env=git_env(home),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=errs)
        deadline = time.monotonic() + GIT_TIMEOUT_S
        why = ""
        while True:
            try:
                proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    why = f"git {args[0]} took longer than {GIT_TIMEOUT_S:.0f} s"
                elif _tree_bytes(cwd) > limit_bytes:
                    why = f"git {args[0]} wrote more than {limit_bytes >> 20} MiB"
                if why:
                    proc.kill()
                    proc.wait()
                    raise FetchError(why) from None
        out.seek(0)
        errs.seek(0)
        stdout = out.read(1 << 20).decode(errors="replace")
        stderr = errs.read(1 << 16).decode(errors="replace")
    if proc.returncode != 0:
        lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
        fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
        raise FetchError((fatal or lines or [f"git {args[0]} exit {proc.returncode}"])[0])
    return stdout


def _entry_key(url: str, commit: str, path: str) -> str:
    return hashlib.sha256(f"{url}\0{commit}\0{path}".encode()).hexdigest()[:40]


def _cached(cache: Path, key: str, name: str) -> Path | None:
    entry = cache / "tasks" / key / name
    return entry if entry.is_dir() else None


def fetch_task(task: RegistryTask, cache: Path) -> Path:
    """The task's directory in the cache, fetched when not there yet."""
    if task.git_url is None:
        raise FetchError("no git_url: local task paths in a registry are not followed")
    url = task.git_url
    check_git_url(url)
    check_commit(task.git_commit_id)
    parts = task_path_parts(task.path)
    path = "/".join(parts)
    name = parts[-1]
    commit = task.git_commit_id
    pointer = cache / "refs" / _entry_key(url, commit or "HEAD", path)
    (cache / "tmp").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache / "tmp") as tmp_s:
        tmp = Path(tmp_s)
        home = tmp / "home"
        home.mkdir()
        if commit is not None and _FULL_SHA.match(commit):
            hit = _cached(cache, _entry_key(url, commit, path), name)
            if hit is not None:
                return hit
            try:
                run_git(["ls-remote", "--", url, "HEAD"], tmp, home)
            except FetchError as e:
                raise FetchError(f"repository {url} cannot be reached: {e}") from None
        else:
            ref = commit or "HEAD"
            try:
                listed = run_git(["ls-remote", "--", url, ref], tmp, home).split()
            except FetchError as e:
                if pointer.is_file():
                    hit = _cached(cache, pointer.read_text().strip(), name)
                    if hit is not None:
                        notice(f"repository {url} cannot be reached ({e}); task {name}: using "
                               f"the copy of {ref} fetched before")
                        return hit
                raise FetchError(f"repository {url} cannot be reached: {e}") from None
            if not listed or not _FULL_SHA.match(listed[0]):
                raise FetchError(f"no branch or tag {ref!r} in repository {url}")
            commit = listed[0]
            hit = _cached(cache, _entry_key(url, commit, path), name)
            if hit is not None:
                write_atomic(pointer, _entry_key(url, commit, path).encode())
                return hit
        key = _entry_key(url, commit, path)
        repo = tmp / "repo"
        run_git(["init", "-q", "--template=", str(repo)], tmp, home)
        run_git(["config", "core.sparseCheckout", "true"], repo, home)
        (repo / ".git" / "info").mkdir(exist_ok=True)
        (repo / ".git" / "info" / "sparse-checkout").write_text(f"/{path}/\n")
        try:
            run_git(["fetch", "-q", "--depth", "1", "--no-tags", "--filter=blob:none", "--", url,
                     commit], repo, home)
        except FetchError as e:
            raise FetchError(f"commit {commit} cannot be fetched from {url}: {e}") from None
        run_git(["checkout", "-q", "--detach", "FETCH_HEAD"], repo, home)
        task_dir = check_checked_out(repo, parts)
        check_task_tree(task_dir)
        staged = tmp / "entry"
        staged.mkdir()
        shutil.copytree(task_dir, staged / name, symlinks=True)
        (staged / "source.json").write_text(json.dumps(
            {"git_url": url, "git_commit_id": commit, "path": path,
             "fetched": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
        final = cache / "tasks" / key
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(staged, final)
        except OSError:
            if _cached(cache, key, name) is None:  # not a concurrent fetch that won: a real error
                raise
        if task.git_commit_id is None or not _FULL_SHA.match(task.git_commit_id):
            write_atomic(pointer, key.encode())
    return final / name
