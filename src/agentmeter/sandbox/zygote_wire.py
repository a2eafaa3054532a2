"""The zygote's messages (standard library only; see zygote_server.py): requests in, as a
4-byte length and that much JSON, with descriptors on their first bytes; answers out, as JSON
lines."""

from __future__ import annotations

import array
import contextlib
import json
import os
import socket
import struct
from typing import Any

#: the most descriptors one request takes (an exec's has four: stdin, stdout, stderr, seccomp)
MAX_FDS = 8
#: where an exec's seccomp program is (its request's fourth descriptor; bwrap --seccomp 3)
SECCOMP_FD = 3


def send(sock: socket.socket, msg: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the harness is gone: the socket's EOF ends this keeper
        sock.sendall(json.dumps(msg).encode() + b"\n")


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def frame(msg: dict[str, Any]) -> bytes:
    data = json.dumps(msg).encode()
    return struct.pack("!I", len(data)) + data


def recv_request(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """One request: a 4-byte length, then that much JSON; descriptors ride on its first bytes.
    None at EOF."""
    fds = array.array("i")
    msg, anc, _, _ = sock.recvmsg(4, socket.CMSG_SPACE(MAX_FDS * fds.itemsize),
                                  socket.MSG_CMSG_CLOEXEC)
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if not msg:
        for fd in fds:
            os.close(fd)
        return None
    rest = _recv_exact(sock, 4 - len(msg)) if len(msg) < 4 else b""
    body = None if rest is None else _recv_exact(sock, struct.unpack("!I", msg + rest)[0])
    if body is None:
        for fd in fds:
            os.close(fd)
        return None
    return json.loads(body), list(fds)
