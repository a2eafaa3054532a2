"""Sandbox backends by name: a new built-in backend is one module plus one line in ``_BACKENDS``;
one from outside the tree is an import path (``--backend package.module:factory``) or an
installed package's entry point in group ``agentmeter.sandbox_backends``, a factory called with
the build log like the built-in ones (docs/plugins.md).

Backends are imported when asked for, so a host that cannot run one (no dockerd, say) still
imports this module; a backend that cannot start here raises SandboxError saying why.
"""

from __future__ import annotations

from collections.abc import Callable

from agentmeter import plugins
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
    """Built-in backends and those installed as entry points."""
    return sorted({*_BACKENDS, *plugins.entry_point_names("sandbox backend")})


def backend_problem(name: str) -> str | None:
    """Why ``name`` names no backend (None: it does); an entry point is not imported."""
    return plugins.name_problem("sandbox backend", name, _BACKENDS, backend_names,
                                "package.module:factory")


def make_backend(name: str, log: BuildLog = None) -> SandboxBackend:
    """The backend called ``name``; SandboxError if this host cannot provide it."""
    factory = _BACKENDS.get(name)
    if factory is not None:
        return factory(log)
    target = plugins.lookup("sandbox backend", name)
    if target is None:
        raise UnknownBackendError(f"unknown sandbox backend {name!r} (known: {', '.join(backend_names())})")
    backend: SandboxBackend = target(log)
    return backend
