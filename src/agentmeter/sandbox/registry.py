"""Sandbox backends by name: a new backend is one module plus one line in ``_BACKENDS``.

Backends are imported when asked for, so a host that cannot run one (no dockerd, say) still
imports this module; a backend that cannot start here raises SandboxError saying why.
"""

from __future__ import annotations

from collections.abc import Callable

from agentmeter.sandbox.protocol import SandboxBackend

#: receives one line per layer-build event (progress display); may be None
BuildLog = Callable[[str], None] | None
BackendFactory = Callable[[BuildLog], SandboxBackend]


def _local(log: BuildLog) -> SandboxBackend:
    from agentmeter.sandbox.local import LocalBackend

    backend = LocalBackend(progress=None)
    backend.layers.log = log
    return backend


def _docker(log: BuildLog) -> SandboxBackend:
    from agentmeter.sandbox.docker import DockerBackend
    from agentmeter.sandbox.dockerd import ensure_dockerd

    ensure_dockerd()
    return DockerBackend()


_BACKENDS: dict[str, BackendFactory] = {
    "local": _local,
    "docker": _docker,
}


class UnknownBackendError(ValueError):
    """No backend of that name."""


def backend_names() -> list[str]:
    return sorted(_BACKENDS)


def make_backend(name: str, log: BuildLog = None) -> SandboxBackend:
    """The backend called ``name``; SandboxError if this host cannot provide it."""
    factory = _BACKENDS.get(name)
    if factory is None:
        raise UnknownBackendError(f"unknown sandbox backend {name!r} (known: {', '.join(backend_names())})")
    return factory(log)
