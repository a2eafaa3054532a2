"""Which of a run's tasks it can run, and how: the run's network default given to tasks that
state none, allowlist entries naming the host refused without ``--allow-host-network``, and
why a task cannot run on the local backend. ``session.prepare`` applies them."""

from __future__ import annotations

from typing import Any, Literal

from agentmeter.runner.tasksandbox import base_image
from agentmeter.sandbox.dockerfile import local_refusals, parse_dockerfile
from agentmeter.sandbox.hostpolicy import entries_naming_the_host
from agentmeter.sandbox.layers import unobtainable
from agentmeter.sandbox.spec import LayerBuildError
from agentmeter.tasks.models import Task

#: ``--network-default``: the network of tasks that state none
NetworkDefault = Literal["none", "public"]


def with_network_default(tasks: list[Task], default: NetworkDefault) -> list[Task]:
    """The tasks with the run's network default given to those that state no network (their
    agent sandbox's, and a separate verifier's); a task that states its network keeps it."""
    public = default == "public"
    out = []
    for t in tasks:
        update: dict[str, Any] = {}
        if t.network_default:
            update.update(allow_internet=public, allowed_hosts=(), allowed_hosts_origin=None)
        sep = t.separate_verifier
        if sep is not None and sep.network_default:
            update["separate_verifier"] = sep.model_copy(
                update={"allow_internet": public, "allowed_hosts": ()})
        out.append(t.model_copy(update=update) if update else t)
    return out


def host_network(tasks: list[Task], allowed: bool) -> tuple[list[Task], dict[str, str]]:
    """The tasks as the run's ``--allow-host-network`` has them, and those it refuses (by id,
    the file and key named): an exact allowed_hosts entry naming the host's own or an internal
    address (``127.0.0.1``, ``localhost``, ``10.0.0.5``) needs the flag (sandbox/hostpolicy.py)."""
    if allowed:
        return [t.model_copy(update={"host_network": True}) for t in tasks], {}
    refused: dict[str, str] = {}
    for t in tasks:
        verifier = t.verifier_network.allowed_hosts if t.verifier_network else ()
        hosts = entries_naming_the_host(tuple(dict.fromkeys((*t.allowed_hosts, *verifier))))
        if hosts:
            where = t.allowed_hosts_origin or f"{t.path}: allowed_hosts"
            refused[t.id] = (f"{where}: {', '.join(hosts)} "
                             f"{'names' if len(hosts) == 1 else 'name'} the host's own or an "
                             "internal address, which a sandbox reaches only when the run allows "
                             "it: --allow-host-network (agentmeter run, agentmeter tasks check)")
    return tasks, refused


def local_problems(tasks: list[Task]) -> dict[str, str]:
    """Why a task cannot run on the local backend, by task id: a prebuilt image without a
    recipe that it cannot have (not cached, its registry unreachable: see runner/tasksandbox.py:
    base_image) or a Dockerfile it cannot build (one that does not parse, an ADD of a URL: file
    and line named; a failing RUN step can only be found by building: see
    executor.prepare_environments)."""
    problems: dict[str, str] = {}
    for t in tasks:
        image = base_image(t)
        why = unobtainable(image) if image is not None else None
        if why is not None:
            problems[t.id] = why
        elif t.dockerfile is not None:
            try:
                parsed = parse_dockerfile(t.dockerfile.read_text(), str(t.dockerfile))
            except (LayerBuildError, OSError, UnicodeDecodeError) as e:
                problems[t.id] = str(e)
                continue
            refusals = local_refusals(parsed)
            if refusals:
                problems[t.id] = "; ".join(refusals)
    return problems
