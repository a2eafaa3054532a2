"""Package attributes imported on first use (PEP 562), so ``import agentmeter.x`` stays cheap
for the CLI's start-up."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, names: Mapping[str, str]
                 ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose ``names`` (name -> the module that
    defines it) are imported when first read, then kept in the package's namespace."""
    namespace = sys.modules[package].__dict__

    def get(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def listing() -> list[str]:
        return sorted({*namespace, *names})

    return get, listing
