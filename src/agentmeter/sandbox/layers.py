"""Cached read-only layers for the local backend.

A layer recipe (a setup script, or a Dockerfile of the supported subset) is replayed step by
step. Every file-system step (RUN, COPY/ADD, WORKDIR, a script) becomes one cached layer keyed by
the digest of everything below it plus the step itself, so tasks whose Dockerfiles begin alike
share those layers, as Docker's build cache does. ENV/ARG/USER only change the metadata carried
into later steps (and into the key). A step runs in a sandbox whose upper dir becomes the layer;
it is renamed into the cache only when the step succeeded, so a broken layer is never cached.
Run as root, a step's files are owned by ids of the sandbox range (``idmap.py``) and the keys
say so.

Multi-stage Dockerfiles (``dockerfile.py``): the final stage's steps (after those of the stages
it is built FROM) form the layers a sandbox runs on; each stage a ``COPY --from`` needs is built
the same way as a chain of its own on the root of its FROM image (``from_root``: the one place an
image becomes a root), and the COPY step's key holds that chain's digest. The step copies from
a sandbox started on the stage's layers (``buildcopy.py``): both sandboxes live in the same
shifted id range, so owners pass unchanged. ``COPY --from=<image>`` is a stage with no steps.

The layers start from a root (``LocalRoot``): a task's prebuilt image (``SandboxSpec.image``) or
the environment Dockerfile's FROM image (or a stage's), unpacked from a registry by ``oci.py``
when it can be had (then the Debian base's runtime emulation steps are left out); else
agentmeter's Debian base, with one notice (and the task image's recipe, if it has one, built on
it). Right after the environment's layers comes the adapt step (``images.ADAPT_SCRIPT``: the
sandbox account and the harness directories); independent layers (agent installs) are built on
the root plus that step and lie under the environment's layers (which win).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from agentmeter.notices import notice
from agentmeter.paths import cache_dir
from agentmeter.sandbox import idmap, oci, rootfs
from agentmeter.sandbox.dockerfile import (
    DockerStep,
    ParsedDockerfile,
    emulation_steps,
    local_refusals,
    parse_dockerfile,
)
from agentmeter.sandbox.images import ADAPT_FORMAT, ADAPT_SCRIPT, adapt_error, faithful_stand_in
from agentmeter.sandbox.layer_steps import (
    BUILD_STEP_TIMEOUT_S,
    Step,
    as_root,
    copy_sources,
    digest,
    run_step,
    step_timeout,
    tree_digest,
)
from agentmeter.sandbox.spec import (
    RECIPE_HINT,
    BaseImage,
    LayerBuildError,
    LayerSpec,
    SandboxError,
    SandboxSpec,
)

if TYPE_CHECKING:
    from agentmeter.sandbox.local import LocalBackend

BuildLog = Callable[[str], None]

#: package-manager state an independent layer must not lay over an environment's own
INDEPENDENT_DROPPED = ("var/lib/dpkg", "var/lib/apt", "var/cache", "var/log", "etc/ld.so.cache",
                       "tmp", "root/.cache", "root/.npm")


class LayerMeta(BaseModel):
    """Image configuration carried through the steps (Docker's ENV, WORKDIR and USER)."""

    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    user: str | None = None


@dataclass(frozen=True)
class LocalRoot:
    """Where a local sandbox's layers start: the lowest lower dir, the digest keying the layers
    above it and the metadata it starts them with (an image's Env, WorkingDir, User)."""

    lower: str
    chain: str
    meta: LayerMeta
    #: the image the tree is (None: agentmeter's Debian base or the host skeleton)
    image: str | None = None
    #: why the FROM image it stands in for could not be had ("FROM x: no registry is …")
    stand_in_for: str | None = None


@dataclass
class Chain:
    """Cached layers on a root: a Dockerfile stage's, or the stack a sandbox runs on."""

    digest: str                  # names the chain so far (the next layer's name is derived)
    base: str                    # the root's lower dir (absolute)
    names: list[str] = field(default_factory=list)   # cached layers, bottom first
    meta: LayerMeta = field(default_factory=LayerMeta)
    args: dict[str, str] = field(default_factory=dict)
    #: LocalRoot.stand_in_for of its root
    stand_in_for: str | None = None

    def lowers(self) -> list[str]:
        return [f"{n}/fs" for n in reversed(self.names)] + [self.base]


def image_refusal(image: BaseImage, why: str) -> str:
    """Why the local backend cannot run a task whose prebuilt image it cannot have."""
    return (f"{image.origin}: the local backend cannot use the prebuilt image {image.ref!r}: "
            f"{why}, and the task gives no Dockerfile to build it from. Run it where a registry "
            f"holding it is reachable, with --backend docker (after 'docker load'), or add "
            f"{RECIPE_HINT}")


def unobtainable(image: BaseImage) -> str | None:
    """Before a run: why ``image`` (with no recipe) cannot be had by the local backend, or None
    when it is cached or its registry answers (the pull itself happens when it is built)."""
    if image.recipe is not None or oci.cached(image.ref) is not None:
        return None
    try:
        why = oci.probe(oci.parse_reference(image.ref))
    except oci.ImageUnavailable as e:
        why = str(e)
    return None if why is None else image_refusal(image, f"no registry is reachable ({why})")


class LocalLayerCache:
    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend
        self.dir = cache_dir() / "layers"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log: BuildLog | None = None
        self._images: dict[str, LocalRoot | str] = {}  # ref -> root, or why it cannot be had
        #: one build of a layer at a time in this process (two trials starting the same compose
        #: sidecar or separate verifier build it at once; their temporary dirs share a name)
        self._building: dict[str, asyncio.Lock] = {}

    def debian_root(self, spec: SandboxSpec) -> LocalRoot:
        """The spec's base (Debian, or the host skeleton) as a root."""
        shift = () if self.backend.rootless else (idmap.SHIFT_TAG,)
        chain = digest("base", rootfs.BASE_ID if spec.base == "debian" else "host", *shift)
        return LocalRoot(lower=self.backend.base_lower(spec.base), chain=chain, meta=LayerMeta())

    async def image_root(self, ref: str) -> LocalRoot | str:
        """The image ``ref`` as a root (cached, else pulled: oci.py), or why it cannot be had
        (tried once per backend)."""
        if ref not in self._images:
            try:
                img = await asyncio.to_thread(oci.obtain, ref)
            except SandboxError as e:
                self._images[ref] = str(e)
            else:
                self._images[ref] = LocalRoot(
                    lower=str(img.rootfs), chain=digest("oci", img.key), image=ref,
                    meta=LayerMeta(env=img.env, workdir=img.workdir, user=img.user))
        return self._images[ref]

    async def from_root(self, spec: SandboxSpec, image: str | None, origin: str = "",
                        line: int = 0) -> LocalRoot:
        """The root ``FROM image`` (written at origin:line) starts from: the image itself when
        it can be had, else the spec's base (None: that base) with one notice per image. The one
        place a FROM image becomes a root."""
        if image is None or spec.base != "debian" or oci.same_as_base(image):
            return self.debian_root(spec)
        found = await self.image_root(image)
        if isinstance(found, str):
            oci.say_fallback(image, f"{origin}:{line}", found)
            if faithful_stand_in(image):  # its failures are the step's own
                return self.debian_root(spec)
            return replace(self.debian_root(spec), stand_in_for=f"{image}: {found}")
        return found

    async def _plan(self, spec: SandboxSpec) -> tuple[LocalRoot, list[LayerSpec], list[LayerSpec]]:
        """The root, the environment's layers and the independent ones."""
        env = [layer for layer in spec.layers if not layer.independent]
        installs = [layer for layer in spec.layers if layer.independent]
        if spec.image is not None:
            found = await self.image_root(spec.image.ref)
            if not isinstance(found, str):
                return found, env, installs
            if spec.image.recipe is None:
                raise SandboxError(image_refusal(spec.image, found))
            notice(f"{spec.image.origin}: image {spec.image.ref!r} cannot be had ({found}); "
                   f"building {spec.image.recipe.origin} instead")
            env.insert(0, spec.image.recipe)
        if env and env[0].kind == "dockerfile":
            parsed = parse_dockerfile(env[0].source, env[0].origin)
            root = await self.from_root(spec, parsed.from_image, env[0].origin, parsed.from_line)
            return root, env, installs
        return self.debian_root(spec), env, installs

    def _parse(self, layer: LayerSpec) -> ParsedDockerfile:
        parsed = parse_dockerfile(layer.source, layer.origin)
        refusals = local_refusals(parsed)
        if refusals:
            raise LayerBuildError("\n".join(refusals))
        for text in parsed.notices:
            notice(text)
        return parsed

    async def _steps(self, layer: LayerSpec, spec: SandboxSpec, deadline: float | None,
                     real_from: bool = False) -> list[Step]:
        """The steps of ``layer``; ``real_from``: its FROM is the image itself (not the Debian
        base), so the runtime emulation steps of its FROM line are left out."""
        if layer.kind == "script":
            ctx = tree_digest([layer.context]) if layer.context else ""
            return [Step(key=digest("script", layer.source, ctx, layer.network),
                          label=layer.label or f"script {layer.origin}", origin=layer.origin,
                          script=layer.source, context=layer.context, network=layer.network)]
        parsed = self._parse(layer)
        stages = parsed.all_stages()
        # the stages the final one copies from, each its own chain (lower indices first: a
        # stage only copies from earlier ones)
        trees: dict[int | str, Chain] = {}
        for i in parsed.needed_stages():
            trees[i] = await self._stage_chain(parsed.chain_steps(i), stages[i].from_image,
                                               stages[i].from_line, layer, spec, deadline, trees)
        steps = parsed.chain_steps(len(stages) - 1)
        if real_from:  # only a FROM line's emulation steps carry its line
            from_lines = {s.from_line for s in stages}
            steps = [st for st in steps if st.line not in from_lines]
        return await self._docker_steps(steps, layer, spec,
                                        deadline, trees)

    async def _docker_steps(self, steps: list[DockerStep], layer: LayerSpec, spec: SandboxSpec,
                            deadline: float | None, trees: dict[int | str, Chain]) -> list[Step]:
        out = []
        for st in steps:
            key = digest(st.kind, st.text, repr(st.args), st.chown or "", st.chmod or "",
                          *st.cache_parts())
            source = None
            if st.from_stage is not None:
                source = trees[st.from_stage]
            elif st.from_image is not None:
                if st.from_image not in trees:  # an image, not a stage: a stage with no steps
                    trees[st.from_image] = await self._stage_chain(
                        emulation_steps(st.from_image, st.line), st.from_image, st.line,
                        layer, spec, deadline, trees)
                source = trees[st.from_image]
            if source is not None:
                key = digest(key, "from", source.digest)
            elif st.kind == "COPY" and st.args[:-1]:
                key = digest(key, tree_digest(copy_sources(st, layer)))
            where = f"{layer.label} (line {st.line})" if layer.label else f"{layer.origin}:{st.line}"
            out.append(Step(key=key, label=f"{where}: {st.text.splitlines()[0][:60]}",
                             origin=layer.origin, docker=st, context=layer.context,
                             network="none" if st.offline else layer.network, source=source))
        return out

    async def _stage_chain(self, steps: list[DockerStep], image: str, line: int,
                           layer: LayerSpec, spec: SandboxSpec, deadline: float | None,
                           trees: dict[int | str, Chain]) -> Chain:
        """Build (or find cached) the layers of a stage FROM ``image`` made of ``steps``."""
        root = await self.from_root(spec, image, layer.origin, line)
        chain = Chain(root.chain, root.lower, meta=root.meta, stand_in_for=root.stand_in_for)
        if root.image is not None:  # the image itself: no Debian emulation of its runtime
            steps = [st for st in steps if st.line != line]
        for step in await self._docker_steps(steps, layer, spec, deadline, trees):
            await self._advance(chain, step, layer, spec, deadline)
        return chain


    async def resolve(self, spec: SandboxSpec) -> tuple[list[str], LayerMeta]:
        """Lower dirs (top first; layer dirs relative to the cache dir, the root absolute) and
        the resulting metadata; builds every missing layer. The environment's layers are built
        on the root, then the adapt step; independent layers form their own chain on the root
        plus the adapt step and lie under the environment's."""
        root, env, installs = await self._plan(spec)
        shared = Chain(root.chain, root.lower, meta=root.meta, stand_in_for=root.stand_in_for)
        for i, layer in enumerate(env):
            deadline = None if layer.build_timeout_s is None else time.monotonic() + layer.build_timeout_s
            real_from = root.image is not None and i == 0
            for step in await self._steps(layer, spec, deadline, real_from):
                await self._advance(shared, step, layer, spec, deadline)
        if spec.base == "debian":
            await self._adapt(shared, root, spec)
        ind_names: list[str] = []
        ind = Chain(root.chain, root.lower, meta=root.meta, args=shared.args)
        if installs:
            if spec.base == "debian":
                await self._adapt(ind, root, spec)
            below = len(ind.names)
            for layer in installs:
                deadline = None if layer.build_timeout_s is None else time.monotonic() + layer.build_timeout_s
                for step in await self._steps(layer, spec, deadline):
                    await self._advance(ind, step, layer, spec, deadline, independent=True)
            ind_names = ind.names[below:]
        # the environment's layers (and its adapt step) lie over the installs: a directory an
        # install created where the bare root had none is opaque and must not hide the
        # environment's (e.g. /usr/include/x86_64-linux-gnu from a libc6-dev of the task's)
        lowers = [f"{n}/fs" for n in reversed(ind_names + shared.names)] + [root.lower]
        return lowers, shared.meta.model_copy(update={"env": {**ind.meta.env, **shared.meta.env}})

    async def _adapt(self, chain: Chain, root: LocalRoot, spec: SandboxSpec) -> None:
        """Add the adapt step (images.ADAPT_SCRIPT, as root, no network) to ``chain``."""
        chain.digest = digest(chain.digest, "adapt", str(ADAPT_FORMAT))
        name = chain.digest[:24]
        if not (self.dir / name / "fs").is_dir():
            where = f"image {root.image!r}" if root.image else "agentmeter's Debian base"
            step = Step(key="adapt", label=f"sandbox account and directories ({where})",
                         origin=where, network="none",
                         docker=DockerStep("RUN", 0, "RUN <adapt>", (ADAPT_SCRIPT,)))
            as_root = Chain(chain.digest, chain.base, names=list(chain.names),
                             meta=chain.meta.model_copy(update={"user": None, "workdir": None}))
            try:
                await self._build(step, name, as_root, spec, BUILD_STEP_TIMEOUT_S)
            except LayerBuildError as e:
                raise adapt_error(where, str(e)) from None
        chain.names.append(name)

    async def _advance(self, chain: Chain, step: Step, layer: LayerSpec, spec: SandboxSpec,
                       deadline: float | None, *, independent: bool = False) -> None:
        """Apply ``step`` to ``chain``: metadata steps change its metadata, the others add a
        layer (built unless cached)."""
        meta = chain.meta
        marker = ("independent",) if independent else ()
        if not as_root(meta):  # built as the USER account since (not as uid 1000)
            marker = (*marker, "as-user")
        chain.digest = digest(chain.digest, step.key, meta.model_dump_json(), *marker)
        st = step.docker
        if st is not None and st.kind in ("ENV", "ARG", "USER"):
            if st.kind == "USER":
                chain.meta = meta.model_copy(update={"user": st.args[0]})
            else:
                pairs = dict(zip(st.args[::2], st.args[1::2], strict=True))
                if st.kind == "ENV":
                    chain.meta = meta.model_copy(update={"env": {**meta.env, **pairs}})
                else:
                    chain.args.update(pairs)
            return
        if st is not None and st.kind == "WORKDIR":
            wd = st.args[0] if st.args[0].startswith("/") else \
                f"{(meta.workdir or '/').rstrip('/')}/{st.args[0]}"
            chain.meta = meta.model_copy(update={"workdir": wd})
        name = chain.digest[:24]
        if not (self.dir / name / "fs").is_dir():
            async with self._building.setdefault(name, asyncio.Lock()):
                if not (self.dir / name / "fs").is_dir():  # else built while this one waited
                    await self._build(step, name, chain, spec, step_timeout(layer, deadline),
                                      independent=independent)
        chain.names.append(name)

    async def _build(self, step: Step, name: str, chain: Chain, spec: SandboxSpec,
                     timeout: float, *, independent: bool = False) -> None:
        started = time.monotonic()
        if self.log:
            self.log(f"building layer {name[:12]}: {step.label}")
        meta = chain.meta
        # a step after a non-root USER runs as that account, resolved against the build's own
        # /etc/passwd and /etc/group as docker build resolves it (accounts.py)
        build_spec = SandboxSpec(base=spec.base, network=step.network,  # type: ignore[arg-type]
                                 user="root", workdir=meta.workdir or "/",
                                 agent_user=None if as_root(meta) else meta.user)
        try:
            sb = await self.backend.start_raw(build_spec, chain.lowers(), meta)
        except SandboxError as e:
            if build_spec.agent_user is None:
                raise
            raise LayerBuildError(f"{step.origin}: {step.label}: {e}") from None
        tmp = self.dir / f".tmp-{name}-{os.getpid()}"
        ok = False
        try:
            await run_step(self.backend, sb, step, meta, chain.args, timeout, spec)
            tmp.mkdir(parents=True, exist_ok=True)
            ok = True
        except LayerBuildError as e:  # on a stand-in: the image that could not be had first
            stand_in = step.source.stand_in_for if step.source is not None else None
            stand_in = stand_in or chain.stand_in_for
            if stand_in is None:
                raise
            raise LayerBuildError(f"{stand_in}, so this step ran on agentmeter's Debian "
                                  f"stand-in for it and failed: {e}") from None
        finally:
            await sb.stop(keep_upper=tmp / "fs" if ok else None)
        final = self.dir / name
        if final.exists():  # built concurrently by someone else
            shutil.rmtree(tmp, ignore_errors=True)
            return
        if independent:
            for rel in INDEPENDENT_DROPPED:
                _drop(tmp / "fs", rel)
        (tmp / "step.txt").write_text(f"{step.label}\nbuilt in {time.monotonic() - started:.1f}s\n")
        os.rename(tmp, final)


def _drop(fs: Path, rel: str) -> None:
    """Remove ``rel`` from a step's upper dir ``fs`` as host root without following a link: a
    link on the way (``var -> /var``, which the image's programs, run as the step's root, may
    leave) is itself removed, never followed onto the host's own directories."""
    path = fs
    for part in rel.split("/"):
        path = path / part
        if not path.is_symlink() and not path.exists():
            return
        if path.is_symlink() or not path.is_dir():  # a link, file or whiteout: it alone goes
            with contextlib.suppress(OSError):
                path.unlink()
            return
    shutil.rmtree(path, ignore_errors=True)
