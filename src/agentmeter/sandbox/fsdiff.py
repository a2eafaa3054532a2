"""File-system snapshots and diffs, shared by every backend.

A snapshot records size, mtime and mode per path. A file whose mtime is so close to the
snapshot's own time that a later write could keep the same mtime ("racy", as git calls it) also
gets a content digest, and only such files are hashed again when diffing.

Listings are bounded (``fsnames.CAPS``: entries, depth, bytes of names; a note says what was
left out) and a diff's paths are escaped (``fsnames.escape_path``): the tree is the agent's.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Sequence

from agentmeter.sandbox import fsnames
from agentmeter.sandbox.spec import FsDiff, FsEntry, FsSnapshot

#: mtimes within this window of the snapshot time are not trusted on their own.
RACY_WINDOW_NS = 2_000_000_000


@functools.lru_cache(maxsize=64)
def _matcher(patterns: tuple[str, ...]) -> Callable[[str], object]:
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns)).match


def is_ignored(rel: str, patterns: Sequence[str]) -> bool:
    """True when any path component of ``rel`` (or the whole path) matches a pattern."""
    if not patterns:
        return False
    match = _matcher(tuple(patterns))
    return any(match(part) for part in rel.split("/")) or bool(match(rel))


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "f"
    if stat.S_ISDIR(mode):
        return "d"
    if stat.S_ISLNK(mode):
        return "l"
    return "o"


def _digest_file(top: str, rel: str) -> str | None:
    try:
        fd = fsnames.open_exact(top, rel, os.O_RDONLY | os.O_NONBLOCK, fsnames.kernel_name(top))
    except OSError:
        return None
    h = hashlib.blake2b(digest_size=16)
    try:
        with os.fdopen(fd, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


def walk_host_tree(top: str, ignore: Sequence[str], budget: fsnames.Budget | None = None
                   ) -> dict[str, os.stat_result]:
    """lstat of every path under ``top`` (relative paths), never following symlinks, without
    recursion, within ``budget`` (default: ``fsnames.CAPS``). ``top`` has no link in it
    (``inroot.resolve_in_root``): none is followed on the way to it either."""
    budget = budget if budget is not None else fsnames.Budget()
    match = _matcher(tuple(ignore)) if ignore else None

    def skip(name: str, rel: str) -> bool:
        # parents were checked already: only the new component and the whole path
        return match is not None and bool(match(name) or match(rel))
    return dict(fsnames.scan(top, budget, skip, exact=True))


def snapshot_host_tree(top: str, root_label: str, ignore: Sequence[str]) -> FsSnapshot:
    taken = time.time_ns()
    entries: dict[str, FsEntry] = {}
    budget = fsnames.Budget()
    for rel, st in walk_host_tree(top, ignore, budget).items():
        kind = _kind(st.st_mode)
        digest = None
        if kind == "f" and taken - st.st_mtime_ns < RACY_WINDOW_NS:
            digest = _digest_file(top, rel)
        # model_construct: thousands of trusted values, validation would dominate the cost
        entries[rel] = FsEntry(kind, st.st_size, st.st_mtime_ns,  # type: ignore[arg-type]
                               stat.S_IMODE(st.st_mode), digest)
    return FsSnapshot.model_construct(root=root_label, taken_ns=taken, entries=entries,
                                      note=budget.note)


def diff_entries(
    before: FsSnapshot,
    now: dict[str, FsEntry],
    digest_of: Callable[[str], str | None],
    ignore: Sequence[str],
    now_note: str | None = None,
) -> FsDiff:
    """Compare a snapshot with the current listing (``now_note``: what its caps left out).
    ``digest_of(rel)`` hashes a current file. The diff's paths are escaped."""
    old = before.entries
    if ignore:
        old = {k: v for k, v in old.items() if not is_ignored(k, ignore)}
    created = sorted(k for k in now if k not in old)
    deleted = sorted(k for k in old if k not in now)
    modified: list[str] = []
    for rel in sorted(now.keys() & old.keys()):
        a, b = old[rel], now[rel]
        if a.kind != b.kind or a.mode != b.mode:
            modified.append(rel)
        elif a.kind == "d":
            continue
        elif a.size != b.size or a.mtime_ns != b.mtime_ns:
            modified.append(rel)
        elif a.digest is not None and a.kind == "f" and digest_of(rel) != a.digest:
            modified.append(rel)  # same size and mtime: only racy files are hashed again
    esc = fsnames.escape_path
    notes = [f"{when}: {n}" for when, n in (("before the agent", before.note),
                                            ("after the agent", now_note)) if n]
    return FsDiff(created=[esc(p) for p in created], modified=[esc(p) for p in modified],
                  deleted=[esc(p) for p in deleted], notes=notes)


def diff_host_tree(top: str, before: FsSnapshot, ignore: Sequence[str]) -> FsDiff:
    budget = fsnames.Budget()
    now = {
        rel: FsEntry(_kind(st.st_mode), st.st_size, st.st_mtime_ns,  # type: ignore[arg-type]
                     stat.S_IMODE(st.st_mode))
        for rel, st in walk_host_tree(top, ignore, budget).items()
    }
    return diff_entries(before, now, lambda rel: _digest_file(top, rel), ignore,
                        budget.note)


# --- listings produced inside a sandbox (docker backend) -------------------------------------

def find_listing_cmd(caps: fsnames.Caps) -> str:
    """A find command (GNU find) whose output :func:`parse_find_listing` reads: one level past
    the depth cap (so the parser sees what it leaves out), its output cut past what the caps
    allow (names and, per entry, at most 64 bytes of the other fields)."""
    limit = caps.name_bytes + 64 * caps.entries + 1
    return (f"find . -mindepth 1 -maxdepth {caps.depth + 1} -printf '%P\\0%y\\0%s\\0%T@\\0%m\\0'"
            f" | head -c {limit}")


def parse_find_listing(raw: bytes, ignore: Sequence[str],
                       budget: fsnames.Budget | None = None) -> dict[str, FsEntry]:
    """The entries of :func:`find_listing_cmd`'s output, within ``budget`` (default:
    ``fsnames.CAPS``); an output cut short ends with an incomplete record, which is dropped."""
    budget = budget if budget is not None else fsnames.Budget()
    fields = raw.split(b"\0")
    out: dict[str, FsEntry] = {}
    kinds = {"f": "f", "d": "d", "l": "l"}
    for i in range(0, len(fields) - 5, 5):  # records whose five fields all ended in a NUL
        rel = fields[i].decode("utf-8", "surrogateescape")
        if not rel or is_ignored(rel, ignore):
            continue
        if rel.count("/") >= budget.caps.depth:  # in a directory at the depth cap
            budget.too_deep += 1
            continue
        try:
            y = fields[i + 1].decode()
            secs, _, frac = fields[i + 3].decode().partition(".")
            mtime_ns = int(secs) * 1_000_000_000 + int((frac + "000000000")[:9])
            entry = FsEntry(kind=kinds.get(y, "o"), size=int(fields[i + 2]),  # type: ignore[arg-type]
                            mtime_ns=mtime_ns, mode=int(fields[i + 4], 8))
        except ValueError:
            continue
        if not budget.admit(rel):
            break
        out[rel] = entry
    return out


def snapshot_from_listing(root: str, taken_ns: int, entries: dict[str, FsEntry],
                          digests: dict[str, str], note: str | None = None) -> FsSnapshot:
    fixed = {
        rel: e._replace(digest=digests[rel]) if rel in digests else e
        for rel, e in entries.items()
    }
    return FsSnapshot(root=root, taken_ns=taken_ns, entries=fixed, note=note)


def racy_files(entries: dict[str, FsEntry], taken_ns: int) -> Iterable[str]:
    return (r for r, e in entries.items() if e.kind == "f" and taken_ns - e.mtime_ns < RACY_WINDOW_NS)
