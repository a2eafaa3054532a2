"""Plug-ins from outside the source tree: Python import paths and package entry points.

Three ways in, for agents, verifier kinds, metrics and sandbox backends (docs/plugins.md):

- a built-in name (each registry's own table);
- a Python import path ``package.module:attr`` (the module importable from ``sys.path``);
- a package entry point in one of :data:`GROUPS`, so ``pip install my-agent`` makes ``-a my-agent``
  work. Entry points are read from the installed distributions' metadata (no import) and their
  object imported only when used.

Agent files (``-a ./agent.toml``) are the agents registry's own (``agents/agentfile.py``).
Everything here fails with :class:`PluginError`, one message naming the import path or the entry
point and what is wrong. Only the standard library is imported, so the registries stay cheap.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib import metadata

#: registry → its entry-point group
GROUPS: dict[str, str] = {
    "agent": "agentmeter.agents",
    "verifier kind": "agentmeter.verifiers",
    "metric": "agentmeter.metrics",
    "sandbox backend": "agentmeter.sandbox_backends",
}

_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


class PluginError(ValueError):
    """A plug-in that cannot be used; the message names it and says what is wrong."""


def is_import_path(name: str) -> bool:
    """``package.module:attr`` (what :func:`load_import_path` takes)."""
    return _IMPORT_PATH.match(name) is not None


def load_import_path(target: str, what: str, *, cwd: bool = True) -> Any:
    """The object at ``package.module:attr``; ``what`` names the registry for messages.
    ``cwd=False`` (a name a task gave, not the user): never imported from the current
    directory (see :func:`_from_cwd`)."""
    module_name, _, attr = target.partition(":")
    where = f"{what} {target!r}"
    if not is_import_path(target):
        raise PluginError(f"{where}: not an import path (use package.module:Name)")
    if cwd:
        _search_cwd_last()
    elif (found := _from_cwd(module_name)) is not None:
        raise PluginError(f"{where}: a task names a module of the current directory ({found}): "
                          "not imported (install it, or put its directory on PYTHONPATH)")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and module_name.startswith(e.name):
            # the console script has no current directory on sys.path: a task's module there
            # is not found rather than refused, so say why (docs/plugins.md)
            hint = ("" if cwd or not _in_cwd(module_name) else
                    " (a task's kind is never imported from the current directory: install it, "
                    "or put its directory on PYTHONPATH)")
            raise PluginError(f"{where}: no module named {e.name!r} on the Python path{hint}") \
                from None
        raise PluginError(f"{where}: importing {module_name!r} failed: "
                          f"{type(e).__name__}: {e}") from None
    except Exception as e:  # the plug-in's own code failed: say so, no traceback
        raise PluginError(f"{where}: importing {module_name!r} failed: "
                          f"{type(e).__name__}: {e}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{where}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _from_cwd(module_name: str) -> str | None:
    """Where ``module_name``'s top-level package would be imported from, when that is the
    current directory itself (sys.path's implicit ``''`` or the appended cwd) and the user did
    not put it on ``PYTHONPATH``: a task from a checked-out repository saying
    ``kind = "evil:V"`` imported ``./evil.py`` (run as the runner, root) when agentmeter ran
    from the repository. A package installed below it (a project's ``.venv``) is not refused.
    Finding a top-level module runs none of its code."""
    import importlib.util

    from agentmeter.paths import realpath

    top = module_name.split(".")[0]
    if top in sys.modules:
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    places: list[str | None] = [*(spec.submodule_search_locations or ())] or [spec.origin]
    here = realpath(os.getcwd())
    chosen = {realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    for place in places:
        if (place and os.path.isabs(place) and here not in chosen
                and realpath(os.path.dirname(place)) == here):
            return str(place)
    return None


def _in_cwd(module_name: str) -> bool:
    """Whether the current directory holds ``module_name``'s top-level module or package."""
    top = os.path.join(os.getcwd(), module_name.split(".")[0])
    return os.path.isfile(top + ".py") or os.path.isdir(top)


def _search_cwd_last() -> None:
    """An import path also finds modules in the current directory, searched after everything
    else (so it shadows no installed module), as ``python -m`` would find them first."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
        importlib.invalidate_caches()


@dataclass(frozen=True)
class Installed:
    """One entry point of an agentmeter group, as ``agentmeter plugins`` lists it."""

    kind: str  # "agent", "verifier kind", …
    group: str
    name: str
    value: str  # package.module:attr
    distribution: str  # "name version", or "?" when the metadata does not say
    location: str  # where the distribution is installed


def _entry_points(group: str) -> list[metadata.EntryPoint]:
    from importlib import metadata  # read only when a name is not built in (it is not cheap)

    return list(metadata.entry_points(group=group))


def _dist_of(ep: metadata.EntryPoint) -> tuple[str, str]:
    dist = ep.dist
    if dist is None:
        return "?", "?"
    try:
        location = str(dist.locate_file(""))
    except Exception:  # a custom finder's distribution may not locate files
        location = "?"
    return f"{dist.metadata['Name']} {dist.version}", location


def installed(kinds: list[str] | None = None) -> list[Installed]:
    """Every entry point in agentmeter's groups (or those of ``kinds``), sorted."""
    out: list[Installed] = []
    for kind, group in GROUPS.items():
        if kinds is not None and kind not in kinds:
            continue
        for ep in _entry_points(group):
            dist, location = _dist_of(ep)
            out.append(Installed(kind, group, ep.name, ep.value, dist, location))
    return sorted(out, key=lambda i: (i.group, i.name, i.distribution))


def entry_point_names(kind: str) -> list[str]:
    return sorted({ep.name for ep in _entry_points(GROUPS[kind])})


def load_entry_point(kind: str, name: str) -> Any | None:
    """The object of entry point ``name`` in ``kind``'s group; None when none is installed.
    Two distributions offering the same name is an error naming both."""
    group = GROUPS[kind]
    found = [ep for ep in _entry_points(group) if ep.name == name]
    if not found:
        return None
    if len({ep.value for ep in found}) > 1:
        offers = "; ".join(sorted(f"{_dist_of(ep)[0]}: {ep.value}" for ep in found))
        raise PluginError(f"{kind} {name!r}: entry point {name!r} in group {group!r} is offered "
                          f"by more than one package ({offers})")
    ep = found[0]
    dist = _dist_of(ep)[0]
    where = f"{kind} {name!r}: entry point {name} = {ep.value!r} (group {group!r}, package {dist})"
    try:
        return ep.load()
    except ModuleNotFoundError as e:
        raise PluginError(f"{where}: no module named {e.name!r} on the Python path") from None
    except AttributeError as e:
        raise PluginError(f"{where}: {e}") from None
    except Exception as e:
        raise PluginError(f"{where}: loading failed: {type(e).__name__}: {e}") from None


def lookup(kind: str, name: str, *, cwd: bool = True) -> Any | None:
    """A plug-in's object by import path or entry point name; None when ``name`` is neither.
    ``cwd=False``: a name from a task (:func:`load_import_path`)."""
    if is_import_path(name):
        return load_import_path(name, kind, cwd=cwd)
    return load_entry_point(kind, name)


def exists(kind: str, name: str, *, cwd: bool = True) -> bool:
    """Whether ``name`` names a plug-in, without importing an entry point's code (an import
    path is imported: that is the only way to know it is there)."""
    if is_import_path(name):
        load_import_path(name, kind, cwd=cwd)
        return True
    return name in entry_point_names(kind)


def name_problem(kind: str, name: str, builtin: Collection[str],
                 known: Callable[[], Iterable[str]], form: str, *, cwd: bool = True
                 ) -> str | None:
    """Why ``name`` names no built-in ``kind`` and no plug-in of it (None: it does), e.g.
    ``unknown verifier kind 'x' (known: a, b; or package.module:Class)``; ``form`` is how an
    import path of that kind is written; ``known`` lists every name (called for the message)."""
    if name in builtin:
        return None
    try:
        if exists(kind, name, cwd=cwd):
            return None
    except PluginError as e:
        return str(e)
    return f"unknown {kind} {name!r} (known: {', '.join(known())}; or {form})"
