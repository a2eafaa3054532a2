"""A Harbor task's ``environment/docker-compose.yaml``: its sidecar services.

Harbor merges the file on top of its own configuration of the ``main`` service (the agent's
container). agentmeter reads what it can honour and says what it does not:

- ``main``: only ``depends_on`` is honoured (the agent starts once those conditions hold); its
  other keys are noticed as ignored (the main sandbox is built from the task's environment).
- every other service is a *sidecar* (``Sidecar``): ``build`` (``context``, ``dockerfile``) or
  ``image``, ``entrypoint``, ``command``, ``environment``, ``working_dir``, ``healthcheck``
  (``test``, ``interval``, ``timeout``, ``retries``, ``start_period``, ``start_interval``,
  ``disable``) and ``depends_on`` (list form, or ``condition: service_started |
  service_healthy | service_completed_successfully``). ``expose``/``ports`` need nothing: the
  sidecars share the main sandbox's network namespace, so every port is reachable at the
  service's name. Other keys are noticed as ignored.

A dependency cycle, an unknown dependency or a service with neither ``build`` nor ``image`` is
a problem naming the file and key (the task is refused).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, cast

from agentmeter.paths import within
from agentmeter.tasks.errors import TaskError, TaskProblem
from agentmeter.tasks.models import DependsCondition, Healthcheck, Sidecar

COMPOSE_NAMES = ("docker-compose.yaml", "docker-compose.yml")
MAIN = "main"
SERVICE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
_CONDITIONS = ("service_started", "service_healthy", "service_completed_successfully")
_HONOURED = {"build", "image", "entrypoint", "command", "environment", "working_dir",
             "healthcheck", "depends_on", "expose", "ports", "container_name", "restart"}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_s(value: object) -> float:
    """A compose duration (``'2s'``, ``'1m30s'``, ``'500ms'``; a bare number is seconds)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like '5s', got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not text or pos != len(text):
        raise ValueError(f"expected a duration like '5s' or '1m30s', got {value!r}")
    return total


def _command(value: object, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(shlex.split(value))
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return tuple(str(v) for v in value)
    raise ValueError(f"{key}: expected a string or a list of strings")


def healthcheck(value: object) -> Healthcheck | None:
    """A compose ``healthcheck`` as Docker runs it (its defaults: interval 30 s, timeout 30 s,
    retries 3, start_period 0; start_interval: the interval); None when disabled or ``["NONE"]``."""
    if not isinstance(value, dict):
        raise ValueError("healthcheck: expected a mapping")
    if value.get("disable") is True:
        return None
    test = value.get("test")
    if isinstance(test, str):
        command = test
    elif isinstance(test, list) and test and all(isinstance(t, str) for t in test):
        kind, args = test[0], [str(t) for t in test[1:]]
        if kind == "NONE":
            return None
        if kind == "CMD-SHELL" and len(args) == 1:
            command = args[0]
        elif kind == "CMD" and args:
            command = shlex.join(args)
        else:
            raise ValueError(f"healthcheck.test: expected ['CMD', …], ['CMD-SHELL', cmd] or a "
                             f"string, got {test!r}")
    else:
        raise ValueError("healthcheck.test: expected a string or a list")
    retries = value.get("retries", 3)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ValueError(f"healthcheck.retries: expected a count, got {retries!r}")
    interval = duration_s(value.get("interval", "30s"))
    return Healthcheck(command=command, interval_s=interval,
                       timeout_s=duration_s(value.get("timeout", "30s")) or 30.0,
                       start_period_s=duration_s(value.get("start_period", 0)),
                       start_interval_s=duration_s(value.get("start_interval", interval)),
                       retries=retries)


def depends_on(value: object) -> dict[str, DependsCondition]:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return {str(v): "service_started" for v in value}
    if isinstance(value, dict):
        out: dict[str, DependsCondition] = {}
        for name, spec in value.items():
            cond = (spec or {}).get("condition", "service_started") if isinstance(spec, dict | None) \
                else None
            if cond not in _CONDITIONS:
                raise ValueError(f"depends_on.{name}.condition: expected one of "
                                 f"{', '.join(_CONDITIONS)}, got {cond!r}")
            out[str(name)] = cast(DependsCondition, cond)
        return out
    raise ValueError("depends_on: expected a list of services or a mapping")


def _environment(value: object) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): "" if v is None else str(v) for k, v in value.items()}
    if isinstance(value, list):
        out = {}
        for item in value:
            key, _, val = str(item).partition("=")
            out[key] = val
        return out
    raise ValueError("environment: expected a mapping or a list of KEY=VALUE")


def _sidecar(name: str, svc: dict[str, Any], file: Path, notes: list[str]) -> Sidecar:
    origin = f"{file}: services.{name}"
    build = svc.get("build")
    dockerfile = context = None
    if build is not None:
        if isinstance(build, str):
            build = {"context": build}
        if not isinstance(build, dict):
            raise ValueError("build: expected a path or a mapping")
        task_dir = file.parent.parent.resolve()
        raw_context = file.parent / str(build.get("context", "."))
        context = raw_context.resolve()
        if not context.is_relative_to(task_dir) or not within(raw_context, task_dir):
            raise ValueError(f"build.context: {context} lies outside the task")
        # the runner reads it as root: an absolute path, '..' or a link must stay in the task
        raw_dockerfile = context / str(build.get("dockerfile", "Dockerfile"))
        dockerfile = raw_dockerfile.resolve()
        if not dockerfile.is_relative_to(task_dir) or not within(raw_dockerfile, task_dir):
            raise ValueError(f"build.dockerfile: {dockerfile} lies outside the task")
        if not dockerfile.is_file():
            raise ValueError(f"build: no Dockerfile at {dockerfile}")
    image = svc.get("image")
    if build is None and not isinstance(image, str):
        raise ValueError("needs 'build' or 'image'")
    ignored = sorted(str(k) for k in svc if k not in _HONOURED)
    if ignored:
        notes.append(f"{origin}: ignored: {', '.join(ignored)}")
    hc = svc.get("healthcheck")
    return Sidecar(
        name=name, dockerfile=dockerfile, context=context,
        image=image if build is None else None,
        entrypoint=None if svc.get("entrypoint") is None else _command(svc["entrypoint"],
                                                                       "entrypoint"),
        command=None if svc.get("command") is None else _command(svc["command"], "command"),
        environment=_environment(svc.get("environment", {})),
        workdir=str(svc["working_dir"]) if svc.get("working_dir") else None,
        healthcheck=None if hc is None else healthcheck(hc),
        depends_on=depends_on(svc.get("depends_on", [])), origin=origin)


def start_order(services: dict[str, Sidecar]) -> list[Sidecar]:
    """Dependencies first; raises ValueError on a cycle or an unknown service."""
    order: list[Sidecar] = []
    state: dict[str, str] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            raise ValueError(f"depends_on: a cycle: {' -> '.join((*path, name))}")
        state[name] = "visiting"
        for dep in services[name].depends_on:
            if dep not in services:
                raise ValueError(f"services.{name}.depends_on: no service {dep!r}")
            visit(dep, (*path, name))
        state[name] = "done"
        order.append(services[name])

    for name in sorted(services):
        visit(name, ())
    return order


def read_compose(env_dir: Path) -> tuple[list[Sidecar], dict[str, DependsCondition],
                                         list[TaskProblem], list[str]]:
    """(sidecars in start order, main's depends_on, problems, notices) of the environment's
    compose file; nothing when it has none."""
    from agentmeter.tasks.terminal_bench import _read_yaml

    sidecars: list[Sidecar] = []
    main_deps: dict[str, DependsCondition] = {}
    problems: list[TaskProblem] = []
    notes: list[str] = []
    for name in COMPOSE_NAMES:
        file = env_dir / name
        if not file.is_file():
            continue
        try:
            data = _read_yaml(file)
        except TaskError as exc:
            problems += exc.problems
            continue
        services = data.get("services") if isinstance(data, dict) else None
        if services is None:
            services = {}
        if not isinstance(services, dict):
            problems.append(TaskProblem(file, "expected a mapping of services", "services"))
            continue
        other_top = sorted(str(k) for k in data if k not in ("services", "version")) \
            if isinstance(data, dict) else []
        if other_top:
            notes.append(f"{file}: ignored: {', '.join(other_top)}")
        found: dict[str, Sidecar] = {}
        for svc_name, svc in services.items():
            key = f"services.{svc_name}"
            if not isinstance(svc, dict | None):
                problems.append(TaskProblem(file, "expected a mapping", key))
                continue
            svc = svc or {}
            try:
                if svc_name == MAIN:
                    main_deps = depends_on(svc.get("depends_on", []))
                    ignored = sorted(str(k) for k in svc if k != "depends_on")
                    if ignored:
                        notes.append(f"{file}: ignored: "
                                     f"{', '.join(f'{key}.{k}' for k in ignored)} (the main "
                                     "sandbox is built from the task's environment)")
                    continue
                if not SERVICE_NAME.match(str(svc_name)):
                    raise ValueError("a service name is letters, digits, '_', '.', '-'")
                found[str(svc_name)] = _sidecar(str(svc_name), svc, file, notes)
            except ValueError as exc:
                problems.append(TaskProblem(file, str(exc), key))
        try:
            for dep in main_deps:
                if dep not in found:
                    raise ValueError(f"services.main.depends_on: no service {dep!r}")
            sidecars = start_order(found)
        except ValueError as exc:
            problems.append(TaskProblem(file, str(exc), "services"))
        break  # Harbor reads docker-compose.yaml; the .yml spelling only without it
    return sidecars, main_deps, problems, notes
