"""Names an agent made, made safe to store and show, and bounded listings of trees it made.

A file name is any bytes but ``/`` and NUL: invalid UTF-8, newlines, terminal escapes, bidi
overrides (U+202E) are all legal. Such a name reaches a record (a trial's file diff, an
artifact's name) only escaped: :func:`escape_name` gives printable, valid text, and is
reversible (:func:`unescape_name` gives the name's bytes back):

- a byte that is not part of valid UTF-8 becomes ``\\xNN``;
- an ASCII control character (newline, tab, ESC, DEL, ...) becomes ``\\xNN``;
- any other character Python does not call printable (controls, format characters such as
  U+202E and U+200B, line and paragraph separators, surrogates, private-use and unassigned
  code points, spaces but U+0020) becomes ``\\uNNNN`` (``\\UNNNNNNNN`` above U+FFFF): a
  ``\\xNN`` is always one byte, a ``\\u`` always one character;
- a backslash becomes ``\\\\``.

Listings of such trees are bounded (:class:`Caps`: entries, depth, bytes of names) and never
recurse in Python (a 1,500-deep directory would overflow its stack): what a cap left out is said
in a note recorded on the trial.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

#: characters a name keeps as they are (printable ASCII but the backslash)
_PLAIN = re.compile(r"[ -\[\]-~]*")
_ESCAPE = re.compile(rb"\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(\\))")


def escape_name(name: str | bytes) -> str:
    """``name`` (bytes, or text as ``os.fsdecode`` gives it) as printable, valid text."""
    text = os.fsdecode(name) if isinstance(name, bytes) else name
    if _PLAIN.fullmatch(text):
        return text
    out: list[str] = []
    for ch in text:
        cp = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif 0xDC80 <= cp <= 0xDCFF:  # a byte os.fsdecode could not decode
            out.append(f"\\x{cp - 0xDC00:02x}")
        elif cp < 0x80:
            out.append(ch if 0x20 <= cp < 0x7F else f"\\x{cp:02x}")
        elif not ch.isprintable():  # Unicode's Cc, Cf, Cs, Co, Cn, Zl, Zp, Zs but the space
            out.append(f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}")
        else:
            out.append(ch)
    return "".join(out)


def unescape_name(text: str) -> bytes:
    """The bytes of the name :func:`escape_name` made ``text`` of."""

    def one(m: re.Match[bytes]) -> bytes:
        byte, bmp, astral, backslash = m.groups()
        if backslash is not None:
            return b"\\"
        if byte is not None:
            return bytes([int(byte, 16)])
        return chr(int(bmp or astral, 16)).encode("utf-8", "surrogatepass")

    return _ESCAPE.sub(one, text.encode("utf-8"))


def escape_path(path: str) -> str:
    """A relative path (``/``-separated, from ``os.fsdecode``) with each name escaped."""
    return path if _PLAIN.fullmatch(path) else "/".join(escape_name(p) for p in path.split("/"))


# --- bounded listings --------------------------------------------------------------------


@dataclass(frozen=True)
class Caps:
    """What one listing of an agent-made tree may hold."""

    entries: int = 100_000
    depth: int = 256
    name_bytes: int = 32 << 20


#: the caps every listing uses (tests lower them: ``monkeypatch.setattr(fsnames, "CAPS", ...)``)
CAPS = Caps()


def caps() -> Caps:
    return CAPS


@dataclass
class Budget:
    """Counts a listing against its caps; ``note`` says what was left out."""

    caps: Caps = field(default_factory=caps)
    entries: int = 0
    name_bytes: int = 0
    too_deep: int = 0
    full: str | None = None

    def admit(self, rel: str) -> bool:
        """Whether ``rel`` may be listed; once False for a full listing, always False."""
        if self.full is not None:
            return False
        size = len(rel.encode("utf-8", "surrogateescape"))
        if self.entries >= self.caps.entries:
            self.full = f"more than {self.caps.entries} entries"
            return False
        if self.name_bytes + size > self.caps.name_bytes:
            self.full = f"more than {self.caps.name_bytes} bytes of names"
            return False
        self.entries += 1
        self.name_bytes += size
        return True

    def descend(self, rel: str) -> bool:
        """Whether the directory ``rel`` may be listed (it is within the depth cap)."""
        if rel.count("/") + 1 >= self.caps.depth:
            self.too_deep += 1
            return False
        return True

    @property
    def note(self) -> str | None:
        parts = []
        if self.full is not None:
            parts.append(f"listing cut after {self.entries} entries: {self.full}")
        if self.too_deep:
            parts.append(f"what lies deeper than {self.caps.depth} levels left out "
                         f"({self.too_deep} cut)")
        return "; ".join(parts) or None


def kernel_name(top: str) -> str:
    """The kernel's own path of the directory ``top`` (``/proc/self/fd``), the reference
    ``open_exact`` compares with; ``top``'s last component is not followed."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def open_exact(top: str, rel: str, flags: int, name: str) -> int:
    """A descriptor of ``top/rel`` opened without following a link below ``top``: the last
    component with ``O_NOFOLLOW``, and the kernel's own path of what was opened must be
    ``name`` (``kernel_name(top)``) joined with ``rel`` (a directory on the way swapped for a
    link, by a process of the sandbox racing the walk, resolves elsewhere). OSError otherwise."""
    fd = os.open(os.path.join(top, rel) if rel else top, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        want = (name.rstrip("/") + "/" + rel) if rel else name
        if os.readlink(f"/proc/self/fd/{fd}") != want:
            raise OSError(errno.ELOOP, "a symbolic link on the way", rel)
    except BaseException:
        os.close(fd)
        raise
    return fd


def scan(top: str, budget: Budget, skip: Callable[[str, str], bool] | None = None,
         *, exact: bool = False) -> Iterator[tuple[str, os.stat_result]]:
    """``(relative path, lstat)`` of everything under ``top``, shallowest first, never following
    symlinks, without recursion, within ``budget`` (directories at its depth are not entered).
    ``skip(name, relpath)`` leaves an entry (and what is under it) out. Unreadable directories
    are skipped. Each directory is opened with ``open_exact``. ``exact``: ``top`` is taken as
    given (a sandbox's tree, its links resolved inside it: ``inroot``), else the host's links
    in it are resolved first."""
    if not exact:
        top = os.path.realpath(top)
    try:
        name = kernel_name(top)
    except OSError:
        return
    queue = collections.deque([""])
    while queue and budget.full is None:
        rel_dir = queue.popleft()
        try:
            fd = open_exact(top, rel_dir, os.O_RDONLY | os.O_DIRECTORY, name)
        except OSError:
            continue
        try:
            it = os.scandir(fd)  # reads a duplicate of fd
        except OSError:
            os.close(fd)
            continue
        try:
            with it:
                for de in it:
                    rel = f"{rel_dir}/{de.name}" if rel_dir else de.name
                    if skip is not None and skip(de.name, rel):
                        continue
                    try:
                        st = de.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if not budget.admit(rel):
                        break
                    yield rel, st
                    if stat.S_ISDIR(st.st_mode) and budget.descend(rel):
                        queue.append(rel)
        finally:
            os.close(fd)


def walk_files(top: str, budget: Budget) -> list[str]:
    """Relative paths (``os.fsdecode`` text) of the regular files under ``top``, shallowest
    first (see ``scan``)."""
    return [rel for rel, st in scan(top, budget) if stat.S_ISREG(st.st_mode)]


def prune_depth(top: str, depth: int) -> int:
    """Remove what lies deeper than ``depth`` levels under ``top`` (a host copy of an agent's
    tree, so later copies and readers never meet more); returns how many directories were cut."""
    cut = 0
    stack: list[tuple[str, int]] = [(top, 0)]
    while stack:
        path, level = stack.pop()
        try:
            with os.scandir(path) as it:
                subdirs = [de.path for de in it if de.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for sub in subdirs:
            if level + 1 >= depth:
                remove_tree(sub)
                cut += 1
            else:
                stack.append((sub, level + 1))
    return cut


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove ``path`` and all below it, of any depth, never following symlinks; what cannot be
    removed is left (no error). ``shutil.rmtree`` recurses in Python (3.11) and overflows on a
    deep agent-made tree: then coreutils (``rm``, and ``chmod`` for directories left unreadable,
    as overlayfs leaves its work directory) finish the job."""
    try:
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except (OSError, RecursionError):
        pass
    target = os.fspath(path)
    for argv in (["rm", "-rf", "--", target], ["chmod", "-R", "u+rwx", "--", target],
                 ["rm", "-rf", "--", target]):
        if not os.path.lexists(target):
            return
        with contextlib.suppress(OSError):
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
