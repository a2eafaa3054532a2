"""Harbor's separate verifier environment (``[verifier] environment_mode = "separate"`` or a
``[verifier.environment]`` table).

After the agent, its collect hooks and the artifact copy, the agent's sandbox is stopped; the
verifier runs in a fresh sandbox that holds nothing of the agent's but what was collected:
``/logs/artifacts`` and the task's declared artifacts, restored at their original absolute paths
from the trial's host copies. The fresh sandbox is, as in Harbor: the image that ``tests/Dockerfile``
builds (build context ``tests/``), else ``[verifier.environment] docker_image``, else a new copy of
the task's own environment. No agent installation, no gateway socket; its network is the verifier
phase's. ``/tests`` is staged root-only as in every trial.
"""

from __future__ import annotations

from pathlib import Path

from agentmeter.runner.hooks import ARTIFACTS_DIR
from agentmeter.sandbox.protocol import Sandbox, SandboxBackend
from agentmeter.sandbox.spec import AGENT_USER, BaseImage, LayerSpec, SandboxSpec
from agentmeter.tasks import artifact_paths
from agentmeter.tasks.models import Task, TaskArtifact


def verifier_spec(task: Task, environment: list[LayerSpec], image: BaseImage | None,
                  agent_spec: SandboxSpec) -> SandboxSpec:
    """The verifier's sandbox: ``environment``/``image`` are the task's own (a copy of the agent's
    environment without the agent) unless the task gives the verifier one of its own; mounts and
    limits are the agent sandbox's (``agent_spec``)."""
    sep = task.separate_verifier
    assert sep is not None
    if sep.dockerfile is not None:
        environment = [LayerSpec(kind="dockerfile", source=sep.dockerfile.read_text(),
                                 origin=str(sep.dockerfile), context=sep.dockerfile.parent,
                                 label=f"{task.id} verifier environment",
                                 build_timeout_s=task.build_timeout_s)]
        image = None
    elif sep.docker_image is not None:
        environment, image = [], BaseImage(ref=sep.docker_image, origin=sep.origin)
    return SandboxSpec(base=task.base, image=image, mounts=agent_spec.mounts,
                       layers=tuple(environment), workdir=task.workdir,
                       env=dict(task.environment_env), user=AGENT_USER, limits=agent_spec.limits,
                       network="full" if sep.allow_internet else
                       "allowlist" if sep.allowed_hosts else "none",
                       allowed_hosts=() if sep.allow_internet else sep.allowed_hosts,
                       allow_host_network=task.host_network, net_extras=True)


def collected(task: Task, artifacts_dir: Path) -> list[tuple[Path, str]]:
    """(host copy, path inside) of every artifact the trial collected, the conventional
    directory first."""
    out = []
    for art in (TaskArtifact(source=ARTIFACTS_DIR, destination=ARTIFACTS_DIR.strip("/")),
                *task.artifacts):
        host = artifact_paths.inside(artifacts_dir, art.destination)  # never a host path outside
        if host is not None and host.exists() and not host.is_symlink():
            out.append((host, art.source))
    return out


async def start_verifier_sandbox(backend: SandboxBackend, spec: SandboxSpec, task: Task,
                                 artifacts_dir: Path) -> Sandbox:
    """Start the verifier's sandbox and restore the collected artifacts in it."""
    box = await backend.start(spec)
    try:
        await box.exec(["install", "-d", "-m", "0777", ARTIFACTS_DIR], user="root")
        for host, inside in collected(task, artifacts_dir):
            await box.copy_in(host, inside, user="root")
    except BaseException:
        await box.stop()
        raise
    return box
