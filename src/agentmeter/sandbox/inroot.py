"""A path inside a sandbox as the host sees it, below the sandbox's root directory.

The image's own symbolic links are followed as the sandbox would follow them, with the root
as ``/``: an absolute target and ``..`` stay below the root (``RESOLVE_IN_ROOT``). The local
backend's workdir diff uses it: ``WORKDIR /w/tmp`` in an image with ``/w -> /`` is the
sandbox's ``/tmp``, never the host's (security review finding 7)."""

from __future__ import annotations

import os
import stat

from agentmeter.sandbox.spec import SandboxError

#: links followed at most (as the kernel's MAXSYMLINKS)
MAX_LINKS = 40


def resolve_in_root(root: str, path: str) -> str:
    """``root`` joined with ``path`` (absolute inside the sandbox) resolved with ``root`` as
    ``/``: no component of the result below ``root`` was a link when it was resolved. A
    missing component is kept as named. SandboxError on a link loop."""
    todo = [p for p in path.split("/") if p not in ("", ".")]
    todo.reverse()
    done: list[str] = []
    links = 0
    while todo:
        name = todo.pop()
        if name == "..":
            if done:
                done.pop()
            continue
        here = os.path.join(root, *done, name)
        try:
            st = os.lstat(here)
        except OSError:
            done.append(name)
            continue
        if not stat.S_ISLNK(st.st_mode):
            done.append(name)
            continue
        links += 1
        if links > MAX_LINKS:
            raise SandboxError(f"{path}: more than {MAX_LINKS} symbolic links inside the sandbox")
        target = os.readlink(here)
        if target.startswith("/"):
            done = []
        todo += reversed([p for p in target.split("/") if p not in ("", ".")])
    return os.path.join(root, *done)
