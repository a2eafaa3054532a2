"""The root of an exec without bwrap (standard library only; see zygote_server.py and
zygote_direct.py, whose init builds it as host root in the sandbox's mount namespace): what
bwrap's ``--bind tree /``, ``--dev-bind``, ``--proc`` with the masks of masks.py, the task's
binds and ``pivot_root`` made, by the new mount API. Each mount is a detached copy
(``open_tree``) or a new one (``fsmount``) whose flags are set on it and every mount under it
before it is attached (``mount_setattr``, ``move_mount``), on a target resolved inside the tree
(``openat2`` with ``RESOLVE_IN_ROOT`` and ``RESOLVE_NO_MAGICLINKS``: an image's symlink never
points a mount outside it), or beneath the mount attached before on a target above it (its
own descriptor: no path of the tree, writable by a concurrent exec of the sandbox, is resolved
twice; :class:`_Placed`)."""

from __future__ import annotations

import ctypes
import os
import platform
import posixpath
from typing import Any

from . import zygote_calls as calls

MS_REC, MS_PRIVATE, MS_SLAVE = 16384, 1 << 18, 1 << 19
MNT_DETACH = 2
#: the new mount API's system calls (the same numbers on x86_64 and aarch64)
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_FSOPEN, SYS_FSCONFIG, SYS_FSMOUNT = 428, 429, 430, 431, 432
SYS_OPENAT2, SYS_MOUNT_SETATTR = 437, 442
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
OPEN_TREE_CLONE, AT_RECURSIVE, AT_EMPTY_PATH = 1, 0x8000, 0x1000
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
FSCONFIG_SET_STRING, FSCONFIG_CMD_CREATE = 1, 6
ATTR_RDONLY, ATTR_NOSUID, ATTR_NODEV, ATTR_NOEXEC = 0x1, 0x2, 0x4, 0x8
RESOLVE_NO_MAGICLINKS, RESOLVE_BENEATH = 0x2, 0x8
RESOLVE_IN_ROOT = 0x10
#: (bwrap's --proc also binds its new /proc's sys, sysrq-trigger, irq and bus read-only over
#: themselves where its caller can write them: the sandbox's root never can, and the masks of
#: masks.py cover them read-only all the same)

_libc = ctypes.CDLL(None, use_errno=True)
for _name in ("syscall", "umount2"):  # looked up once, before any fork
    getattr(_libc, _name)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def direct_supported() -> bool:
    """This machine runs execs without bwrap: a known architecture and Linux 5.12 or later
    (``mount_setattr``; ``openat2`` 5.6, ``open_tree``, ``move_mount`` and ``fsopen`` 5.2).
    Else every exec is a bwrap, as before."""
    try:
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return platform.machine() in SYS_PIVOT_ROOT and (major, minor) >= (5, 12)


def _sys(nr: int, *args: Any, what: str) -> int:
    return calls.check(_libc.syscall(ctypes.c_long(nr), *args), what)


def _set_attrs(fd: int, attrs: int) -> None:
    """``attrs`` added to a detached mount and every mount under it (bwrap's bind_mount adds its
    flags to the bound mount and each of its submounts)."""
    attr = _MountAttr(attrs, 0, 0, 0)
    _sys(SYS_MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH | AT_RECURSIVE, ctypes.byref(attr),
         ctypes.c_size_t(ctypes.sizeof(attr)), what="mount_setattr")


def _attach(mnt: int, target: int, what: str) -> None:
    try:
        _sys(SYS_MOVE_MOUNT, mnt, b"", target, b"", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
             what=f"move_mount {what}")
    finally:
        os.close(mnt)


def _copy(source: str, attrs: int, dirfd: int = -100) -> int:
    """A detached recursive copy of the mount at ``source`` (``dirfd`` itself when "") with
    ``attrs`` added."""
    flags = OPEN_TREE_CLONE | AT_RECURSIVE | os.O_CLOEXEC | (AT_EMPTY_PATH if not source else 0)
    fd = _sys(SYS_OPEN_TREE, dirfd, source.encode(), flags, what=f"open_tree {source}")
    try:
        _set_attrs(fd, attrs)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _fresh(fstype: str, attrs: int, options: dict[str, str]) -> int:
    """A new detached mount of ``fstype`` with the mount flags ``attrs``."""
    fs = _sys(SYS_FSOPEN, fstype.encode(), 1, what=f"fsopen {fstype}")  # FSOPEN_CLOEXEC
    try:
        for k, v in options.items():
            _sys(SYS_FSCONFIG, fs, FSCONFIG_SET_STRING, k.encode(), v.encode(), 0, what="fsconfig")
        _sys(SYS_FSCONFIG, fs, FSCONFIG_CMD_CREATE, None, None, 0, what=f"create {fstype}")
        return _sys(SYS_FSMOUNT, fs, 1, attrs, what=f"fsmount {fstype}")  # FSMOUNT_CLOEXEC
    finally:
        os.close(fs)


def _open(dirfd: int, path: str, resolve: int) -> int:
    how = _OpenHow(os.O_PATH | os.O_CLOEXEC, 0, resolve)
    return _sys(SYS_OPENAT2, dirfd, path.lstrip("/").encode() or b".", ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)), what=f"open {path}")


def _inside(root: int, path: str) -> int:
    """``path`` resolved inside the tree ``root`` (its symlinks and ``..`` never leave it; no
    magic link, as openat2(2) asks of RESOLVE_IN_ROOT's callers)."""
    return _open(root, path, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)


class _Placed:
    """The exec's mounts, each attached on its target resolved inside the tree (``root``), or
    beneath the mount attached before on a target above it (that mount's own descriptor, kept):
    a path of the tree is never resolved twice, as a concurrent exec of the sandbox could turn
    it in between (an image's /proc symlink turned between the proc's mount and its masks left
    that proc unmasked; a parent of a task mount's target, its read-only cover elsewhere)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.mounts: list[tuple[str, int]] = []  # target -> its attached mount

    def attach(self, path: str, mnt: int) -> None:
        path = posixpath.normpath("/" + path.lstrip("/"))  # one leading slash
        above = [(p, fd) for p, fd in self.mounts if path.startswith(p + "/")]
        if above:
            p, fd = max(above, key=lambda m: len(m[0]))
            target = _open(fd, path[len(p) + 1:], RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
        else:
            target = _inside(self.root, path)
        try:
            held = os.dup(mnt)
            try:
                _attach(mnt, target, path)
            except BaseException:
                os.close(held)
                raise
        finally:
            os.close(target)
        self.mounts.append((path, held))  # ``held`` names that mount once attached

    def close(self) -> None:
        for _, fd in self.mounts:
            os.close(fd)


def build_root(spec: dict[str, Any]) -> None:
    """The exec's mount namespace and root (see the module docstring), in its init, host root
    in the sandbox's mount namespace."""
    calls.unshare(calls.CLONE_NEWNS)
    calls.mount(None, "/", None, MS_REC | MS_SLAVE)
    tree = spec["tree"]  # the keeper's path (no part of it the sandbox's)
    # a copy of the tree bound over it (the keeper's mount is locked in this user namespace:
    # pivot_root refuses a locked mount, as bwrap's --bind tree / makes a bind too)
    at = os.open(tree, os.O_PATH | os.O_CLOEXEC)
    try:
        _attach(_copy(tree, ATTR_NOSUID | ATTR_NODEV), at, tree)
    finally:
        os.close(at)
    root = os.open(tree, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # that copy
    try:
        placed = _Placed(root)
        try:
            placed.attach("/dev", _copy(spec["dev"], ATTR_NOSUID))
            placed.attach("/proc", _fresh("proc", ATTR_NOSUID | ATTR_NODEV | ATTR_NOEXEC,
                                          {"source": "proc"}))
            for kind, name in spec["masks"]:  # masks.py, as bwrap made them
                if kind == "ro":  # the host's proc path, read-only
                    mnt = _copy(f"/proc/{name}", ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV)
                elif kind == "null":
                    mnt = _copy("/dev/null", ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV)
                else:  # an empty read-only tmpfs, the sandbox root's (as bwrap's, made there)
                    mnt = _fresh("tmpfs", ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV,
                                 {"source": "tmpfs", "mode": "0755", "uid": str(spec["owner"]),
                                  "gid": str(spec["owner"])})
                placed.attach(f"/proc/{name}", mnt)
            for source, target, read_only in spec["mounts"]:  # the task's, and resolv.conf
                attrs = ATTR_NOSUID | ATTR_NODEV | (ATTR_RDONLY if read_only else 0)
                placed.attach(target, _copy(source, attrs))
        finally:
            placed.close()
        os.fchdir(root)
    finally:
        os.close(root)
    _sys(SYS_PIVOT_ROOT[platform.machine()], b".", b".", what="pivot_root")
    calls.mount(None, ".", None, MS_REC | MS_PRIVATE)  # the old root, now over the new one
    calls.check(_libc.umount2(b".", MNT_DETACH), "umount the old root")
    os.chdir("/")

