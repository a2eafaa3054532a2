"""Who the exec user ``agent`` is in a sandbox (``SandboxSpec.agent_user``).

None is agentmeter's own unprivileged account (uid/gid 1000, home /home/agent, which the adapt
layer of images.py guarantees). Any other value is a Docker ``USER`` value, resolved as Docker
resolves it against the sandbox's own ``/etc/passwd`` and ``/etc/group``: ``name``, ``uid``,
``name:group``, ``uid:gid`` (a uid without a passwd entry: gid 0, home ``/``; a name without one
is an error), supplementary groups from ``/etc/group`` when no group is given; ``IMAGE_USER`` is
the image's final ``USER``, root when it sets none. Both backends read the two files as root
with the harness's own tools before anything of the agent runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agentmeter.sandbox.spec import AGENT_GID, AGENT_UID, AGENT_USER, IMAGE_USER, SandboxError

#: the most of /etc/passwd or /etc/group read (an image could make them huge)
ACCOUNT_FILE_MAX_BYTES = 4 << 20


@dataclass(frozen=True)
class Account:
    uid: int
    gid: int
    home: str
    #: USER and LOGNAME (the uid as text when /etc/passwd has no entry)
    name: str
    #: supplementary groups
    groups: tuple[int, ...] = ()

    @property
    def root(self) -> bool:
        return self.uid == 0


SANDBOX_ACCOUNT = Account(AGENT_UID, AGENT_GID, f"/home/{AGENT_USER}", AGENT_USER)
ROOT_ACCOUNT = Account(0, 0, "/root", "root")


def account_of(sandbox: object) -> Account:
    """Who the exec user ``agent`` is in ``sandbox`` (its resolved ``account``; agentmeter's
    own for a sandbox without one)."""
    account = getattr(sandbox, "account", None)
    return account if isinstance(account, Account) else SANDBOX_ACCOUNT


def user_value(agent_user: str | None, image_user: str | None) -> str | None:
    """The ``USER`` value to resolve for ``agent_user`` (None: agentmeter's account)."""
    if agent_user == IMAGE_USER:
        return image_user or "root"
    return agent_user


def needs_files(value: str | None) -> bool:
    """Whether resolving ``value`` needs the sandbox's passwd and group files."""
    return value is not None and value not in ("", "root", "0", "0:0", "root:root")


def _rows(text: str, fields: int) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) >= fields and parts[0] and not line.startswith(("#", "+", "-")):
            rows.append(parts)
    return rows


def _id(text: str, what: str, value: str) -> int:
    n = int(text)
    if not 0 <= n < 2**32 - 1:
        raise SandboxError(f"USER {value!r}: {what} {n} is out of range")
    return n


def resolve(value: str | None, passwd: str = "", group: str = "") -> Account:
    """The account ``value`` (a Docker ``USER`` value; None: agentmeter's) names, given the
    sandbox's /etc/passwd and /etc/group texts. Raises SandboxError as Docker refuses."""
    if value is None:
        return SANDBOX_ACCOUNT
    if not needs_files(value):
        return ROOT_ACCOUNT
    user, has_group, grp = value.partition(":")
    users = _rows(passwd, 7)
    entry = next((r for r in users if (r[2] == user if user.isdigit() else r[0] == user)), None)
    if entry is None and not user.isdigit():
        raise SandboxError(f"USER {value!r}: unable to find user {user}: no matching entries "
                           "in the image's /etc/passwd")
    if entry is not None and not (entry[2].isdigit() and entry[3].isdigit()):
        raise SandboxError(f"USER {value!r}: its /etc/passwd entry has no numeric ids")
    uid = _id(user if entry is None else entry[2], "uid", value)
    gid = 0 if entry is None else _id(entry[3], "gid", value)
    home = "/" if entry is None or not entry[5] else entry[5]
    name = user if entry is None else entry[0]
    groups = _rows(group, 4)
    extra: tuple[int, ...] = ()
    if has_group:
        if not grp:
            raise SandboxError(f"USER {value!r}: empty group")
        found = next((r for r in groups if (r[2] == grp if grp.isdigit() else r[0] == grp)), None)
        if found is None and not grp.isdigit():
            raise SandboxError(f"USER {value!r}: unable to find group {grp}: no matching "
                               "entries in the image's /etc/group")
        gid = _id(grp if found is None else found[2], "gid", value)
    elif entry is not None:
        extra = tuple(sorted({_id(r[2], "gid", value) for r in groups if r[2].isdigit()
                              and name in r[3].split(",") and int(r[2]) != gid}))
    return Account(uid=uid, gid=gid, home=home, name=name, groups=extra)


#: reads a file of the sandbox as root with the harness's tools (``Sandbox.read_file``)
ReadFile = Callable[[str], Awaitable[bytes]]


async def resolve_in(value: str | None, read: ReadFile) -> Account:
    """``resolve`` against the sandbox's own files, read with ``read`` (through the harness's
    busybox: copyout.py; a missing or symlinked file counts as empty)."""
    texts = ["", ""]
    if needs_files(value):
        for i, path in enumerate(("/etc/passwd", "/etc/group")):
            with contextlib.suppress(SandboxError):
                texts[i] = (await read(path)).decode(errors="replace")
    return resolve(value, *texts)
