"""How much structure a JSON text holds, counted before it is parsed: a shared utility (the
gateway bounds client requests with it, the CLI agents their transcripts and stdout)."""

from __future__ import annotations


def structural_tokens(raw: bytes | bytearray, cap: int) -> int:
    """The ``{``, ``[`` and ``,`` of a JSON text outside its strings, exactly when more than
    ``cap`` (else an upper bound: all of them, strings included; more than ``cap`` as soon as it
    is known to be). C-speed scans, no parse: safe on any input."""
    n = raw.count(b"{") + raw.count(b"[") + raw.count(b",")
    if n <= cap:
        return n
    if b"\x00" in raw:  # UTF-16/32 (JSON over HTTP is UTF-8): its escapes would not be seen
        return cap + 1
    bare = raw.replace(b"\\\\", b"").replace(b'\\"', b"")  # escapes gone: each " starts/ends a string
    if bare.count(b'"') > 2 * cap:  # more strings than the cap: each is a value
        return cap + 1
    n = 0
    for part in bare.split(b'"')[::2]:  # outside the strings
        n += part.count(b"{") + part.count(b"[") + part.count(b",")
    return n
