"""Which hosts a sandbox's proxy (proxy.py) may reach.

Allowlist entries: ``name``, ``name:port``, ``*.example.com`` (its subdomains),
``.example.com`` (the domain and its subdomains), IP literals (``[v6]:port`` with a port), ``*``;
a URL is read as its host.

The host is never an allowlisted destination by accident: ``*``, wildcard entries and public mode
never reach an internal address (hostaddr.py: the host's own, loopback, private, …, in any
spelling). Only an *exact* entry (the literal address or name) reaches one, and only with
``host_network`` (``agentmeter run --allow-host-network``); without it a task that lists such an
entry is refused when it loads (``entries_naming_the_host``).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentmeter.sandbox.hostaddr import names_the_host, parse_ip


def split_entry(entry: str) -> tuple[str, int | None]:
    e = entry.strip().lower()
    if "://" in e:
        e = e.split("://", 1)[1]
    e = e.split("/", 1)[0].rstrip(".")
    if e.startswith("["):  # [v6] or [v6]:port
        host, _, rest = e[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    host, sep, port = e.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host, int(port)
    return e, None


def _same_host(pattern: str, host: str) -> bool:
    if pattern == host:
        return True
    a, b = parse_ip(pattern), parse_ip(host)
    return a is not None and a == b


def _exact(pattern: str) -> bool:
    return pattern != "*" and not pattern.startswith(("*.", "."))


def _wildcard_matches(pattern: str, host: str) -> bool:
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern[1:] or host.endswith(pattern)  # ".example.com"


class HostPolicy:
    """Which hosts a sandbox's proxy may reach: ``allowed`` = None is public mode;
    ``host_network``: exact entries may name internal addresses (the flag
    ``--allow-host-network``)."""

    def __init__(self, allowed: Sequence[str] | None, *, host_network: bool = False) -> None:
        self.allowed = None if allowed is None else tuple(allowed)
        self.host_network = host_network
        self._entries = [split_entry(a) for a in (allowed or ())]

    def _matches(self, host: str, port: int, exact_only: bool) -> bool:
        h = host.lower().rstrip(".").strip("[]")
        for pattern, p in self._entries:
            if p is not None and p != port:
                continue
            if _exact(pattern):
                if _same_host(pattern, h):
                    return True
            elif not exact_only and _wildcard_matches(pattern, h):
                return True
        return False

    def listed(self, host: str, port: int) -> bool:
        return self._matches(host, port, exact_only=False)

    def admits(self, host: str, port: int) -> bool:
        return self.allowed is None or self.listed(host, port)

    def exact(self, host: str, port: int) -> bool:
        """Whether an exact entry (no ``*``, no wildcard) names ``host``."""
        return self._matches(host, port, exact_only=True)

    def may_reach_internal(self, host: str, port: int) -> bool:
        """Whether ``host`` may be (or resolve to) an internal address: an exact entry names
        it and the run allows the host network."""
        return self.host_network and self.exact(host, port)

    def describe(self) -> str:
        return "public" if self.allowed is None else "allowlist: " + ", ".join(self.allowed)


def entries_naming_the_host(allowed: Sequence[str]) -> list[str]:
    """The exact entries of an allowlist that name an internal address or a local name as
    written (``127.0.0.1``, ``[::1]:8080``, ``localhost``): the ones that need
    ``--allow-host-network``. Wildcards never reach the host, so they are not among them."""
    return [a for a in allowed if _exact(split_entry(a)[0]) and names_the_host(split_entry(a)[0])]
