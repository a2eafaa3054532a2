"""The host uid/gid range that root-run local sandboxes live in (see ``local.py``'s docstring).

Run as root, every local sandbox gets its own user namespace in which ids ``0..SHIFT_SIZE-1``
are the host ids ``SHIFT_BASE..SHIFT_BASE+SHIFT_SIZE-1``: the sandbox's root is host uid
``SHIFT_BASE`` (no capability outside its namespace), its agent host uid ``SHIFT_BASE + 1000``.
No host account may own an id in that range (:func:`check_range_free` refuses to start
otherwise). Files in the cached lower layers are owned by shifted ids: the Debian base is
shifted once (:func:`shift_tree`), layers built in a sandbox get shifted owners as they are
written.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from agentmeter.sandbox.spec import SandboxError

#: first host id of the range (2**30: far above login users and the usual /etc/subuid ranges)
SHIFT_BASE = 1 << 30
#: ids 0..65535 inside map onto the range
SHIFT_SIZE = 65536
#: part of every cache key of shifted files, so unshifted caches are never mixed in
SHIFT_TAG = f"uidshift-{SHIFT_BASE}-{SHIFT_SIZE}"

_FCAPS = "security.capability"


def shifted(host_id: int) -> int:
    """The host id of an in-sandbox id (ids already in the range are kept)."""
    if SHIFT_BASE <= host_id < SHIFT_BASE + SHIFT_SIZE:
        return host_id
    if not 0 <= host_id < SHIFT_SIZE:
        raise SandboxError(f"id {host_id} cannot be mapped into a sandbox (ids 0..{SHIFT_SIZE - 1})")
    return SHIFT_BASE + host_id


def unshifted(host_id: int) -> int:
    """The id a shifted owner has inside a sandbox (ids outside the range are kept)."""
    if SHIFT_BASE <= host_id < SHIFT_BASE + SHIFT_SIZE:
        return host_id - SHIFT_BASE
    return host_id


def _shift_one(path: str) -> None:
    st = os.lstat(path)
    uid, gid = shifted(st.st_uid), shifted(st.st_gid)
    if (uid, gid) == (st.st_uid, st.st_gid):
        return
    caps = None
    if stat.S_ISREG(st.st_mode):
        with contextlib.suppress(OSError):
            caps = os.getxattr(path, _FCAPS, follow_symlinks=False)
    os.chown(path, uid, gid, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
        os.chmod(path, stat.S_IMODE(st.st_mode))  # chown cleared setuid/setgid
    if caps is not None:
        os.setxattr(path, _FCAPS, caps, follow_symlinks=False)  # and file capabilities


def shift_tree(root: Path) -> int:
    """Move every owner under ``root`` into the sandbox range (symlinks themselves, never their
    targets; setuid/setgid bits and file capabilities kept). Returns the number of paths."""
    count = 0
    _shift_one(str(root))
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            _shift_one(os.path.join(dirpath, name))
            count += 1
    return count + 1


def _ids_in_range(path: Path, field: int) -> list[str]:
    out = []
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split(":")
            if len(parts) > field and parts[field].isdigit() and \
                    SHIFT_BASE <= int(parts[field]) < SHIFT_BASE + SHIFT_SIZE:
                out.append(parts[0])
    return out


def _subid_overlaps(path: Path) -> list[str]:
    out = []
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split(":")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                start, count = int(parts[1]), int(parts[2])
                if start < SHIFT_BASE + SHIFT_SIZE and start + count > SHIFT_BASE:
                    out.append(parts[0])
    return out


def check_range_free(etc: Path = Path("/etc")) -> None:
    """Refuse to run sandboxes whose ids some host account or subordinate range already owns."""
    for name, users in (("passwd", _ids_in_range(etc / "passwd", 2)),
                        ("group", _ids_in_range(etc / "group", 2)),
                        ("subuid", _subid_overlaps(etc / "subuid")),
                        ("subgid", _subid_overlaps(etc / "subgid"))):
        if users:
            raise SandboxError(
                f"{etc / name}: {', '.join(users)} use ids in {SHIFT_BASE}..{SHIFT_BASE + SHIFT_SIZE - 1}, "
                f"the range local sandboxes run in as root; local sandboxes would share ids with them")


def write_id_map(pid: int) -> bytes:
    """Map the user namespace of ``pid`` (just created, unmapped) onto the range; b"ready" when
    done, else what failed."""
    try:
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as f:
                f.write(f"0 {SHIFT_BASE} {SHIFT_SIZE}\n")
    except OSError as e:
        return f"writing /proc/{pid}/uid_map: {e.strerror}".encode()
    return b"ready"
