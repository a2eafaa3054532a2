"""One step of a local layer build (``layers.py``): what it is, the digests that key it, and
running it in its build sandbox (a script, RUN, WORKDIR, COPY/ADD: ``buildcopy.py``).
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agentmeter.paths import within
from agentmeter.sandbox import accounts, droppings
from agentmeter.sandbox.buildcopy import copy_step
from agentmeter.sandbox.dockerfile import DEFAULT_SHELL, DockerStep
from agentmeter.sandbox.output import strip_ansi
from agentmeter.sandbox.spec import AGENT_USER, LayerBuildError, LayerSpec, SandboxSpec
from agentmeter.sandbox.trust import BUILD_CA_ENV, BUILD_CA_PATH, host_ca_bundle

if TYPE_CHECKING:
    from agentmeter.sandbox.layers import Chain, LayerMeta
    from agentmeter.sandbox.local import LocalBackend

BUILD_STEP_TIMEOUT_S = 1800.0


@dataclass
class Step:
    key: str                       # what makes this step unique (besides its parent)
    label: str                     # for progress and errors
    origin: str
    docker: DockerStep | None = None
    script: str | None = None
    context: Path | None = None
    network: str = "full"
    #: COPY --from: the chain of the stage (or image) copied from
    source: Chain | None = None


def as_root(meta: LayerMeta) -> bool:
    """Whether a build step under ``meta`` runs as root (no USER, or USER root)."""
    return not accounts.needs_files(meta.user)


def digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


def tree_digest(paths: list[Path]) -> str:
    """A digest of build-context trees (a layer's cache key). A symlink counts as its target's
    text, never followed: the context is the task's, and a link in it to a host file
    (``/swapfile``, ``/proc/kcore``) had the host read as root, whole into memory. Files are
    hashed in chunks."""
    h = hashlib.sha256()
    for top in paths:
        items = [top] if top.is_symlink() or not top.is_dir() else droppings.walk(top)
        for p in items:
            h.update(str(p.relative_to(top.parent)).encode())
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                h.update(b"link:" + os.fsencode(os.readlink(p)))
            elif stat.S_ISREG(st.st_mode):
                with p.open("rb") as f:
                    while chunk := f.read(1 << 20):
                        h.update(chunk)
                h.update(str(st.st_mode & 0o777).encode())
    return h.hexdigest()


def copy_sources(st: DockerStep, layer: LayerSpec) -> list[Path]:
    if layer.context is None:
        raise LayerBuildError(f"{layer.origin}:{st.line}: COPY needs a build context directory")
    ctx = layer.context.resolve()
    out: list[Path] = []
    for pattern in st.args[:-1]:
        matches = sorted(glob.glob(str(ctx / pattern))) if any(c in pattern for c in "*?[") \
            else [str(ctx / pattern)]
        for m in matches:
            p = Path(m).resolve()
            if (p != ctx and ctx not in p.parents) or not within(m, ctx):
                raise LayerBuildError(f"{layer.origin}:{st.line}: COPY source {pattern} is outside "
                                      "the build context")
            if not p.exists():
                raise LayerBuildError(f"{layer.origin}:{st.line}: COPY source {pattern} not found "
                                      f"in {ctx}")
            out.append(p)
        if not matches:
            raise LayerBuildError(f"{layer.origin}:{st.line}: COPY source {pattern} matches nothing")
    return out


async def run_step(backend: LocalBackend, sb, step: Step, meta: LayerMeta,  # type: ignore[no-untyped-def]
                   args: dict[str, str], timeout: float, spec: SandboxSpec) -> None:
    env = {**args, **meta.env}
    user = "root" if as_root(meta) else AGENT_USER  # the USER account (LocalLayerCache._build)
    cwd = meta.workdir or "/"
    if step.script is not None:
        if step.context is not None:
            await sb.copy_in(step.context, "/tmp/agentmeter-context")
        await sb.write_file("/tmp/agentmeter-setup.sh", step.script, mode=0o755)
        r = await sb.exec(["bash", "-e", "/tmp/agentmeter-setup.sh"], env=env, user=user,
                          cwd="/tmp/agentmeter-context" if step.context else cwd,
                          timeout=timeout)
        await sb.exec(["rm", "-rf", "/tmp/agentmeter-setup.sh", "/tmp/agentmeter-context"])
        if not r.ok:
            raise LayerBuildError(_failure(step.origin, "setup script", r.exit_code,
                                           r.stdout + r.stderr, r.timed_out))
        return
    st = step.docker
    assert st is not None
    if st.kind == "WORKDIR":
        await sb.exec(["mkdir", "-p", meta.workdir or "/"], cwd="/")
    elif st.kind == "RUN":
        argv = list(st.args) if st.exec_form else [*(st.shell or DEFAULT_SHELL), st.args[0]]
        if st.mkdirs:  # RUN --mount=type=cache|tmpfs: plain directories of the layer
            await sb.exec(["mkdir", "-p", "--", *st.mkdirs], cwd="/")
        ca = host_ca_bundle() if step.network != "none" else None
        if ca is not None:  # lent for this step only (sandbox/trust.py)
            await sb.write_file(BUILD_CA_PATH, ca, mode=0o644)
            env = {**BUILD_CA_ENV, **env}
        r = await sb.exec(argv, env=env, user=user, cwd=cwd, timeout=timeout)
        if ca is not None:
            await sb.exec(["rm", "-f", BUILD_CA_PATH], cwd="/")
        if not r.ok:
            raise LayerBuildError(_failure(f"{step.origin}:{st.line}", f"RUN {' '.join(st.args)}",
                                           r.exit_code, r.stdout + r.stderr, r.timed_out))
    elif st.kind == "COPY":
        dest = st.args[-1]
        if not dest.startswith("/"):
            dest = f"{cwd.rstrip('/')}/{dest}"
        where = f"{step.origin}:{st.line}"
        if step.source is None:
            sources = copy_sources(st, LayerSpec(
                kind="dockerfile", source="", origin=step.origin, context=step.context)) \
                if st.args[:-1] else []
            await copy_step(sb, st, dest, where, sources=sources)
            return
        src_spec = SandboxSpec(base=spec.base, network="none", user="root", workdir="/")
        src = await backend.start_raw(src_spec, step.source.lowers(), step.source.meta)
        try:
            await copy_step(sb, st, dest, where, source=src)
        finally:
            await src.stop()


def step_timeout(layer: LayerSpec, deadline: float | None) -> float:
    """What is left of the layer's build time for its next step (at most the per-step cap)."""
    if deadline is None:
        return BUILD_STEP_TIMEOUT_S
    left = deadline - time.monotonic()
    if left <= 0:
        raise LayerBuildError(f"{layer.origin}: the environment build took longer than its "
                              f"build_timeout_sec ({layer.build_timeout_s:g}s)")
    return min(BUILD_STEP_TIMEOUT_S, left)


def _failure(where: str, what: str, code: int, output: str, timed_out: bool) -> str:
    tail = "\n".join(strip_ansi(output).strip().splitlines()[-20:])
    status = "timed out" if timed_out else f"exit code {code}"
    return f"{where}: {what[:300]} failed ({status}); last output:\n{tail}"
