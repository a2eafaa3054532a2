"""Destination addresses as the resolver reads them, and which of them are the host's.

A sandbox names a destination; the harness's proxy (proxy.py) connects to it from the host, so
every spelling of the host's own services must be recognised, not just ``127.0.0.1``:

- IPv4 as ``inet_aton`` reads it (and so glibc's resolver and most clients): ``127.1``,
  ``0x7f.1``, ``2130706433``, ``0177.0.0.1`` (a leading 0 is octal, 0x hex, fewer than four
  parts fill the last one's bytes);
- IPv6 with brackets and zone ids (``[::1]``, ``fe80::1%eth0``, ``%25`` from URLs), and IPv4
  embedded in IPv6: IPv4-mapped (``::ffff:127.0.0.1``), IPv4-compatible, NAT64 (64:ff9b::/96),
  6to4 (2002::/16), Teredo (2001::/32: server and client);
- *internal* (:func:`is_internal`): loopback, link-local, private (RFC 1918, ULA), unspecified
  (``0.0.0.0``), shared (100.64/10), multicast, reserved, the host's own interface addresses
  (:func:`host_addresses`: a service bound to 0.0.0.0 answers on each of them) and its
  gateways.

Names are not resolved here: the proxy resolves them, checks every address, and connects to the
address it checked (a second lookup could answer differently: DNS rebinding).
"""

from __future__ import annotations

import contextlib
import ipaddress
from pathlib import Path

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: networks that lead to the host itself or to networks behind it (its LAN, docker's bridges,
#: cloud metadata); explicit rather than ``ipaddress``'s is_private, which also counts the
#: documentation and benchmarking ranges (192.0.2/24, 203.0.113/24, 198.18/15: not the host's)
_INTERNAL = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.168.0.0/16", "224.0.0.0/3", "::/127", "100::/64", "64:ff9b:1::/48",
    "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SIIT = ipaddress.ip_network("::ffff:0:0:0/96")
#: names that are this host whatever the resolver says (RFC 6761 and Debian's /etc/hosts)
_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
_DIGITS = {8: "01234567", 10: "0123456789", 16: "0123456789abcdef"}


def _inet_aton_part(text: str) -> int | None:
    if text[:2].lower() == "0x":
        digits, base = text[2:], 16
    elif len(text) > 1 and text[0] == "0":
        digits, base = text[1:], 8
    else:
        digits, base = text, 10
    if not digits or not all(c in _DIGITS[base] for c in digits.lower()):
        return None
    return int(digits, base)


def parse_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """``text`` as ``inet_aton`` reads it (1 to 4 parts, each decimal, 0-octal or 0x-hex, the
    last filling the remaining bytes); None when it is not an IPv4 literal."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = [_inet_aton_part(p) for p in parts]
    if any(v is None for v in values):
        return None
    nums = [v for v in values if v is not None]
    *head, last = nums
    if any(v > 255 for v in head) or last >= 1 << (8 * (5 - len(nums))):
        return None
    value = last
    for i, v in enumerate(head):
        value |= v << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def parse_ip(host: str) -> IPAddress | None:
    """The address ``host`` spells (brackets, zone ids and inet_aton forms allowed); None for a
    name."""
    h = host.strip().lower().rstrip(".")
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if ":" in h:
        try:
            return ipaddress.IPv6Address(h.split("%", 1)[0])
        except ValueError:
            return None
    return parse_ipv4(h)


def embedded_v4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    found: list[ipaddress.IPv4Address] = []
    low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if int(ip) >> 32 == 0 or ip in _NAT64 or ip in _SIIT:
        found.append(low)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return found


def host_addresses() -> set[IPAddress]:
    """This host's own addresses, every interface's (read afresh: interfaces come and go)."""
    found: set[IPAddress] = set()
    with contextlib.suppress(OSError):
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
        for prev, line in zip(lines, lines[1:], strict=False):
            if "/32 host LOCAL" in line:
                with contextlib.suppress(ValueError):
                    found.add(ipaddress.IPv4Address(prev.split()[-1]))
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            raw = line.split()[0]
            with contextlib.suppress(ValueError):
                found.add(ipaddress.IPv6Address(":".join(raw[i:i + 4] for i in range(0, 32, 4))))
    return found


def gateways() -> set[IPAddress]:
    """The host's default gateways (IPv4 and IPv6)."""
    found: set[IPAddress] = set()
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            f = line.split()
            if len(f) > 2 and f[1] == "00000000" and f[2] != "00000000":
                found.add(ipaddress.IPv4Address(bytes.fromhex(f[2])[::-1]))
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/net/ipv6_route").read_text().splitlines():
            f = line.split()
            if len(f) > 4 and f[0] == "0" * 32 and f[1] == "00" and f[4] != "0" * 32:
                found.add(ipaddress.IPv6Address(bytes.fromhex(f[4])))
    return found


def is_internal(ip: IPAddress, own: set[IPAddress] | None = None) -> bool:
    """Whether a connection to ``ip`` from the host could reach the host itself or a network
    behind it (``own``: the host's addresses and gateways, read when not given)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id is not None:
            ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])
        if any(is_internal(v4, own) for v4 in embedded_v4(ip)):
            return True
    if (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast
            or any(ip in n for n in _INTERNAL if n.version == ip.version)):
        return True
    return ip in (host_addresses() | gateways() if own is None else own)


def internal(address: str) -> bool:
    """Whether an address (any spelling :func:`parse_ip` reads) is internal; a string that is
    no address at all counts as internal (nothing unreadable is connected to)."""
    ip = parse_ip(address)
    return True if ip is None else is_internal(ip)


def local_name(host: str) -> bool:
    """Whether ``host`` is a name for this host by definition (``localhost``, ``*.localhost``)."""
    h = host.strip().lower().rstrip(".")
    return h in _LOCAL_NAMES or h.endswith(".localhost")


def names_the_host(host: str) -> bool:
    """Whether ``host`` as written (no lookup) is an internal address or a local name."""
    ip = parse_ip(host)
    return local_name(host) if ip is None else is_internal(ip)


def fence_addresses() -> list[IPAddress]:
    """What a full-network sandbox must not reach: the host's addresses but loopback (inside a
    sandbox that is the sandbox's own), and the gateways."""
    found = {a for a in host_addresses() | gateways() if not a.is_loopback}
    return sorted(found, key=lambda a: (a.version, int(a)))
