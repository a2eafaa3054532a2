"""Extraction of tar streams that came out of a sandbox, which may have been crafted.

``tarfile`` only parses the headers here; every write goes through directory file descriptors,
each path component opened with ``O_NOFOLLOW`` relative to its parent (``dir_fd``), so no
symlink, whatever the archive planted before, is ever followed on the host. Nothing relies on
``os.path.realpath`` (CVE-2025-4517: tarfile's ``data`` filter in Python < 3.12.11/3.13.4 is
beaten by a symlink chain longer than PATH_MAX).

Rules: absolute names and ``..`` components are refused; devices, FIFOs and other special
members are refused; a hard link becomes a copy of a file already extracted from the same
stream (else it is refused); a symlink is kept only when its target is relative with no ``..``
(it then resolves inside the copy), else dropped; modes lose setuid, setgid, sticky and
group/other write, and the owner may always read and write; names keep their bytes (the host's
file system takes any); notes show them as the store does (``fsnames.escape_name``). At most
``MAX_DEPTH`` components and ``MAX_MEMBERS`` members are kept; each member counts against the
byte cap (``DIR_COST``, ``MEMBER_COST``) and at most ``MAX_OPEN_DIRS`` descriptors stay open,
so a wide tree exhausts neither the disk nor the runner's descriptors. Everything is extracted
into a scratch directory beside the destination first and moved in only when the whole stream
was read: a failure writes nothing. Each refusal is
returned as a note for the caller to show.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import shutil
import stat
import tarfile
import tempfile
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, BinaryIO

from agentmeter.sandbox.archive import CopyTooLarge
from agentmeter.sandbox.fsnames import escape_name
from agentmeter.sandbox.spec import SandboxError

MAX_DEPTH = 64
MAX_MEMBERS = 100_000
#: what a member costs against ``max_bytes`` beside a file's data: a directory takes a block
#: on disk (100,000 empty ones in a 50 MB stream made 400 MB), any other member its header
DIR_COST = 4096
MEMBER_COST = 512
#: directory descriptors kept open at once (least recently used closed; re-opened on need)
MAX_OPEN_DIRS = 128
#: notes beyond this many are summed up in one
MAX_NOTES = 50
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


class UntarError(SandboxError):
    """The stream could not be extracted at all; nothing was written."""


@dataclass
class Result:
    """What an extraction kept, and the notes on what it refused."""

    notes: list[str] = field(default_factory=list)
    #: the top member's type: "dir", "file", "symlink", or None (empty stream)
    top_kind: str | None = None
    files: int = 0
    _dropped: int = 0

    def note(self, text: str) -> None:
        if len(self.notes) < MAX_NOTES:
            self.notes.append(text)
        else:
            self._dropped += 1

    def finish(self) -> None:
        if self._dropped:
            self.notes.append(f"... and {self._dropped} more members refused")
            self._dropped = 0


def _components(name: str) -> list[str] | None:
    """The path components of an archive name, or None when it is absolute or has ``..``."""
    if name.startswith("/"):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    return parts  # surrogate-escaped str: os calls write the original bytes


def _excluded(parts: Sequence[str], exclude: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(p, pat) for p in parts for pat in exclude)


class _Tree:
    """Writes below one directory through file descriptors, never following a link."""

    def __init__(self, root: Path) -> None:
        self.root_fd = os.open(root, _DIR_FLAGS)
        #: open descriptors below the root, least recently used first
        self._dirs: OrderedDict[tuple[str, ...], int] = OrderedDict()

    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()
        os.close(self.root_fd)

    def dir_fd(self, parts: Sequence[str], mode: int = 0o700) -> int:
        """The descriptor of directory ``parts`` (made when missing); OSError when a component
        is a symlink or not a directory."""
        key = tuple(parts)
        if not key:
            return self.root_fd
        if key in self._dirs:
            self._dirs.move_to_end(key)
            return self._dirs[key]
        parent = self.dir_fd(parts[:-1])
        with contextlib.suppress(FileExistsError):
            os.mkdir(parts[-1], mode | 0o700, dir_fd=parent)
        fd = os.open(parts[-1], _DIR_FLAGS, dir_fd=parent)
        self._dirs[key] = fd
        if len(self._dirs) > MAX_OPEN_DIRS:  # the parent just used is recent: never this one
            os.close(self._dirs.popitem(last=False)[1])
        return fd

    def clear_entry(self, parent: int, name: str) -> None:
        """Remove a non-directory at ``name`` (a later member replaces an earlier one); a
        directory there raises IsADirectoryError."""
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "a directory is there", name)
        os.unlink(name, dir_fd=parent)

    def write_file(self, parts: Sequence[str], src: IO[bytes], mode: int, mtime: float) -> None:
        parent = self.dir_fd(parts[:-1])
        self.clear_entry(parent, parts[-1])
        fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=parent)
        try:
            while chunk := src.read(_CHUNK):
                _write_all(fd, chunk)
            os.fchmod(fd, mode)
            os.utime(fd, (mtime, mtime))
        finally:
            os.close(fd)

    def open_file(self, parts: Sequence[str]) -> BinaryIO:
        parent = self.dir_fd(parts[:-1])
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", parts[-1])
        return os.fdopen(fd, "rb")

    def symlink(self, parts: Sequence[str], target: str) -> None:
        parent = self.dir_fd(parts[:-1])
        self.clear_entry(parent, parts[-1])
        os.symlink(target, parts[-1], dir_fd=parent)

    def chmod_dir(self, parts: Sequence[str], mode: int) -> None:
        os.fchmod(self.dir_fd(parts, mode), mode)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _file_mode(mode: int) -> int:
    return (mode & 0o755) | 0o600


def _dir_mode(mode: int) -> int:
    return (mode & 0o755) | 0o700


def extract(fileobj: BinaryIO, dest: Path, *, what: str, max_bytes: int, top: str | None = None,
            exclude: Sequence[str] = (), concatenated: bool = False) -> Result:
    """Extract the tar stream ``fileobj`` into the directory ``dest`` (see the module docstring).

    With ``top`` (the name the copied path has in the stream), members outside it are refused;
    a directory ``top`` gives its contents to ``dest``, a file lands as ``dest/top``, a symlink
    ``top`` is not extracted at all (``Result.top_kind`` says "symlink"). ``exclude`` are name
    globs: a member with a matching component is left out. ``concatenated``: the stream is
    several archives one after the other. Raises UntarError (nothing written) when the stream
    is unreadable or truncated, CopyTooLarge when its members hold more than ``max_bytes``."""
    res = Result()
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".agentmeter-untar-", dir=dest.parent))
    try:
        tree = _Tree(scratch)
        try:
            _extract_into(tree, fileobj, res, what=what, max_bytes=max_bytes, top=top,
                          exclude=exclude, concatenated=concatenated)
        finally:
            tree.close()
        if res.top_kind != "symlink":
            _merge(scratch, dest)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    res.finish()
    return res


def _extract_into(tree: _Tree, fileobj: BinaryIO, res: Result, *, what: str, max_bytes: int,
                  top: str | None, exclude: Sequence[str], concatenated: bool) -> None:
    total = 0
    count = 0
    top_parts = _components(top) if top is not None else []
    if top_parts is None or (top is not None and len(top_parts) != 1):
        raise UntarError(f"{what}: bad top name {top!r}")
    strip = 0  # components stripped from every member (1 when top is a directory)
    #: archive name (normalised) -> components where that regular file was written
    written: dict[tuple[str, ...], list[str]] = {}
    try:
        with tarfile.open(fileobj=fileobj, mode="r:", encoding="utf-8", errors="surrogateescape",
                          ignore_zeros=concatenated) as tar:
            while (member := tar.next()) is not None:
                count += 1
                if count > MAX_MEMBERS:
                    res.note(f"more than {MAX_MEMBERS} members: the rest left out")
                    break
                tar.members.clear()  # type: ignore[attr-defined]  # tarfile would keep every member
                shown = escape_name(member.name)
                parts = _components(member.name)
                if parts is None:
                    res.note(f"{shown}: absolute or '..' path refused")
                    continue
                if top is not None:
                    if res.top_kind is None:
                        if parts != top_parts:
                            raise UntarError(f"{what}: the stream does not start with {top!r}")
                        if member.issym() or member.islnk():
                            res.top_kind = "symlink"
                            res.note(f"{top_parts[0]} is a symbolic link: not followed, "
                                     "not copied")
                            return
                        res.top_kind = "dir" if member.isdir() else "file"
                        strip = 1 if member.isdir() else 0
                    elif parts[:1] != top_parts or (strip == 0 and len(parts) > 1):
                        res.note(f"{shown}: outside the copied path, refused")
                        continue
                elif res.top_kind is None:
                    res.top_kind = "dir" if member.isdir() else "file"
                key = tuple(parts)
                parts = parts[strip:]
                if len(parts) > MAX_DEPTH:
                    res.note(f"{shown}: deeper than {MAX_DEPTH} directories, left out")
                    continue
                if exclude and _excluded(parts, exclude):
                    continue
                total += DIR_COST if member.isdir() else MEMBER_COST
                if total > max_bytes:
                    raise CopyTooLarge(f"{what}: its members take more than the {max_bytes} "
                                       "bytes allowed")
                try:
                    if member.isdir():
                        if parts:
                            tree.chmod_dir(parts, _dir_mode(member.mode))
                        else:
                            os.fchmod(tree.root_fd, _dir_mode(member.mode))
                    elif not parts:
                        res.note(f"{shown}: not a directory, refused")
                    elif member.isreg():
                        total += member.size
                        if total > max_bytes:
                            raise CopyTooLarge(f"{what}: its files hold more than the "
                                                f"{max_bytes} bytes allowed")
                        src = tar.extractfile(member)
                        assert src is not None
                        tree.write_file(parts, src, _file_mode(member.mode), member.mtime)
                        written[key] = parts
                        res.files += 1
                    elif member.islnk():
                        link = _components(member.linkname)
                        origin = written.get(tuple(link)) if link is not None else None
                        if origin is None:
                            res.note(f"{shown}: hard link to {escape_name(member.linkname)}, "
                                     "which is not a file of this copy: refused")
                            continue
                        with tree.open_file(origin) as src_file:
                            size = os.fstat(src_file.fileno()).st_size
                            total += size
                            if total > max_bytes:
                                raise CopyTooLarge(f"{what}: its files hold more than the "
                                                    f"{max_bytes} bytes allowed")
                            tree.write_file(parts, src_file, _file_mode(member.mode), member.mtime)
                        written[key] = parts
                        res.files += 1
                    elif member.issym():
                        target = member.linkname
                        tparts = _components(target)
                        if not target or tparts is None:
                            res.note(f"{shown}: symbolic link to {escape_name(target)} "
                                     "(absolute or '..'), dropped")
                            continue
                        tree.symlink(parts, "/".join(tparts))
                    else:
                        res.note(f"{shown}: device, FIFO or other special file, refused")
                except SandboxError:
                    raise
                except OSError as e:
                    res.note(f"{shown}: not written ({e.strerror or e}): a link or a file is in "
                             "the way")
    except (tarfile.TarError, EOFError) as e:
        raise UntarError(f"{what}: not a complete tar stream: {e}") from e


def merge(src: Path, dest: Path) -> None:
    """Move the tree ``src`` into ``dest`` as an extraction does (see ``_merge``)."""
    _merge(src, dest)


def _merge(src: Path, dest: Path) -> None:
    """Move ``src``'s content into ``dest`` (created), replacing what is there; links in
    ``dest`` are replaced, never followed."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(src):
        target = dest / entry.name
        if entry.is_dir(follow_symlinks=False) and target.is_dir() and not target.is_symlink():
            _merge(Path(entry.path), target)
        else:
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(entry.path, target)
