"""A task as a sandbox: the spec a trial's sandbox starts from (the task's environment, its
prebuilt image, the agent's layers, the gateway's socket, limits and network), and what the
runner asks of the task and the sandbox about the agent's account."""

from __future__ import annotations

from agentmeter.agents.base import Agent
from agentmeter.gateway import Gateway
from agentmeter.runner import sidecars
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import (
    AGENT_USER,
    BaseImage,
    ExposedSocket,
    LayerSpec,
    NetworkPolicy,
    SandboxSpec,
    task_limits,
)
from agentmeter.tasks.models import Task
from agentmeter.verify.registry import make_verifier

#: port the gateway appears on inside every sandbox
GATEWAY_PORT = 18080


def task_environment(task: Task) -> list[LayerSpec]:
    if task.dockerfile is not None:
        return [LayerSpec(kind="dockerfile", source=task.dockerfile.read_text(),
                          origin=str(task.dockerfile), context=task.environment_dir,
                          label=f"{task.id} environment", build_timeout_s=task.build_timeout_s)]
    if task.setup_script is not None:
        return [LayerSpec(kind="script", source=task.setup_script.read_text(),
                          origin=str(task.setup_script), context=task.environment_dir,
                          label=f"{task.id} setup", build_timeout_s=task.build_timeout_s)]
    return []


def base_image(task: Task) -> BaseImage | None:
    """A task's prebuilt image as the sandbox's base (Harbor's semantics): with an environment
    recipe too (Dockerfile or setup script), the image is the recipe's prebuilt form: both
    backends use the image when they have or can pull it (the local backend through
    sandbox/oci.py), else build the recipe. With no recipe the image is the environment: a
    backend that cannot have it fails the trial (the local backend refuses it before the run when
    its registry cannot be reached)."""
    if task.docker_image is None:
        return None
    recipe = task_environment(task)
    return BaseImage(ref=task.docker_image, origin=task.docker_image_origin or str(task.path),
                     recipe=recipe[0] if recipe else None)


def staged_early(task: Task) -> bool:
    """Whether the task's verifier files are staged when the sandbox starts (agentmeter's own
    account: hidden from it in a root-only directory) rather than uploaded after the agent's
    processes are gone (Harbor's user, which may be root: Harbor's order)."""
    return task.agent_user is None


def agent_is_root(sandbox: Sandbox) -> bool:
    """Whether the sandbox's agent account is its root (the image's USER: accounts.py)."""
    return sandbox.account.root


PhaseNet = tuple[NetworkPolicy, tuple[str, ...]]


def _net(allow_internet: bool, allowed_hosts: tuple[str, ...]) -> PhaseNet:
    return ("full", ()) if allow_internet else \
        ("allowlist", allowed_hosts) if allowed_hosts else ("none", ())


def phase_networks(task: Task) -> tuple[PhaseNet, PhaseNet] | None:
    """The sandbox networks of the agent phase and of a verifier sharing its sandbox, when they
    differ (the sandbox's network is switched between them: sandbox/netswitch.py); else None."""
    vn = task.verifier_network
    if vn is None or task.separate_verifier is not None or task.scenario is not None:
        return None  # (a scenario's steps share one network: tasks/toml_checks.py)
    agent, verifier = _net(task.allow_internet, task.allowed_hosts), \
        _net(vn.allow_internet, vn.allowed_hosts)
    return None if agent == verifier else (agent, verifier)


def sandbox_spec(task: Task, agent: Agent, gateway: Gateway | None) -> SandboxSpec:
    sockets: tuple[ExposedSocket, ...] = ()
    if gateway is not None and agent.uses_model and gateway.unix_socket is not None:
        sockets = (ExposedSocket(host_path=gateway.unix_socket, port=GATEWAY_PORT),)
    needs = make_verifier(task.verifier_kind).sandbox_needs(task)
    image = base_image(task)
    environment = [] if image is not None else task_environment(task)  # else: image.recipe
    network, hosts = _net(task.allow_internet, task.allowed_hosts)
    switch = phase_networks(task)
    if switch is not None:  # the widest of the phases' (the runner switches before each)
        network = "full" if "full" in (switch[0][0], switch[1][0]) else "allowlist"
        hosts = switch[0][1] if network == "allowlist" else ()
    return SandboxSpec(
        base=task.base,
        image=image,
        mounts=needs.mounts,
        layers=tuple(environment + agent.layers()),
        workdir=task.workdir,
        env={**sidecars.proxy_bypass(task), **task.environment_env},
        user=AGENT_USER,
        agent_user=task.agent_user,
        limits=task_limits(task.memory_mb, task.cpus, task.storage_mb),
        network=network,
        allowed_hosts=hosts,
        network_switch=switch is not None,
        allow_host_network=task.host_network,
        net_extras=True,  # package cache with network, no retries without (sandbox/netsetup.py)
        exposed_sockets=sockets,
    )
