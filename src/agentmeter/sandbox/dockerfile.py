"""Dockerfiles as both backends build them: one parsed model (:class:`ParsedDockerfile`), which
the local backend builds step by step (``layers.py``) and from which the docker backend writes
the Dockerfile it hands to ``docker build`` (``dockerfile_render.py``).

Every instruction of the Dockerfile reference is accepted; each is applied where it means
something to a task's environment:

- ``FROM [--platform=P] image [AS name]``, one stage per FROM (multi-stage builds). Every image
  is built on agentmeter's Debian base (``layers.py``: ``from_root``); ``--platform`` other than
  the host's gives a notice (the host's platform is built). ``FROM <earlier stage>`` continues
  that stage. ARGs declared before the first FROM apply to FROM lines only; a stage sees them
  when it declares ``ARG NAME`` again (docker's rule). ``BUILDPLATFORM``/``TARGETPLATFORM``/
  ``TARGETOS``/``TARGETARCH`` (and ``BUILD*``) are predefined: the host's.
- ``RUN`` (shell or exec form; heredocs ``RUN <<EOF``; ``--network=none`` runs the step offline;
  ``--mount=type=cache|tmpfs`` are plain directories of the layer — what the step leaves there is
  kept, unlike docker; ``--mount=type=bind|secret|ssh`` are refused), ``SHELL`` (the shell of
  later shell-form RUN steps, in its stage and stages built FROM it), ``WORKDIR``, ``ENV``,
  ``USER``, ``ARG``.
- ``COPY``/``ADD`` of build-context files (globs, ``--chown`` with names resolved in the image,
  ``--chmod``, ``--link`` (no effect), heredocs ``COPY <<EOF /path``), ``COPY --from=<stage
  name|index|image:tag>`` from an earlier stage's (or an image's) file tree. ``ADD`` of a local
  tar archive (plain, gzip, bzip2, xz) unpacks it. ``ADD`` of a URL is refused on the local
  backend (:func:`local_refusals`).
- ``CMD``, ``ENTRYPOINT``, ``LABEL``, ``MAINTAINER``, ``EXPOSE``, ``VOLUME``, ``HEALTHCHECK``,
  ``STOPSIGNAL``, ``ONBUILD`` are recorded in :class:`ImageMetadata` and change nothing in the
  build; a trial starts the final stage's ENTRYPOINT with its sandbox (``runner/hooks.py``).

Errors name the file and line.
"""

from __future__ import annotations

import platform
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Literal

from agentmeter.sandbox.dockerfile_text import Heredoc, logical_lines
from agentmeter.sandbox.spec import LayerBuildError

INSTRUCTIONS = ("FROM", "RUN", "WORKDIR", "ENV", "COPY", "ADD", "USER", "ARG", "SHELL", "CMD",
                "ENTRYPOINT", "LABEL", "MAINTAINER", "EXPOSE", "VOLUME", "HEALTHCHECK",
                "STOPSIGNAL", "ONBUILD")
DEFAULT_SHELL = ("/bin/sh", "-c")
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
HOST_ARCH = _ARCH.get(platform.machine().lower(), platform.machine().lower())
HOST_PLATFORM = f"linux/{HOST_ARCH}"
#: docker's predefined platform ARGs, in scope for FROM lines and for a stage's ``ARG NAME``
PLATFORM_ARGS = {f"{w}{k}": v for w in ("BUILD", "TARGET") for k, v in
                 (("PLATFORM", HOST_PLATFORM), ("OS", "linux"), ("ARCH", HOST_ARCH), ("VARIANT", ""))}

StepKind = Literal["RUN", "COPY", "WORKDIR", "ENV", "USER", "ARG"]


@dataclass(frozen=True)
class DockerStep:
    kind: StepKind
    line: int
    text: str  # the instruction as written (after continuation joining), for cache keys and errors
    #: RUN: [command] for shell form or argv for exec form; COPY: [*sources, dest] (context or
    #: stage paths; heredoc files are in ``inline``); WORKDIR/USER: [value]; ENV/ARG: [k1, v1, ...]
    args: tuple[str, ...]
    exec_form: bool = False
    chown: str | None = None
    chmod: str | None = None
    #: RUN shell form: the SHELL in effect (empty: /bin/sh -c)
    shell: tuple[str, ...] = ()
    #: RUN --network=none: the step runs offline
    offline: bool = False
    #: RUN --mount=type=cache|tmpfs: directories made before the step
    mkdirs: tuple[str, ...] = ()
    #: COPY --from: the earlier stage's index, or an image reference (not a stage)
    from_stage: int | None = None
    from_image: str | None = None
    #: ADD: a local tar archive is unpacked
    add: bool = False
    #: COPY <<NAME dest: (NAME, content) files written at dest
    inline: tuple[tuple[str, str], ...] = ()

    def cache_parts(self) -> tuple[str, ...]:
        """What identifies the step beyond kind/text/args (empty for the old subset's steps, so
        their cache keys are unchanged)."""
        parts = []
        if self.shell and self.shell != DEFAULT_SHELL:
            parts.append("shell=" + "\0".join(self.shell))
        if self.offline:
            parts.append("offline")
        if self.mkdirs:
            parts.append("mkdirs=" + "\0".join(self.mkdirs))
        if self.add:
            parts.append("add")
        if self.inline:
            parts.append("inline=" + repr(self.inline))
        return tuple(parts)


#: instructions that only set image configuration (recorded as :class:`Setting`)
SETTINGS = ("SHELL", "CMD", "ENTRYPOINT", "LABEL", "MAINTAINER", "EXPOSE", "VOLUME", "HEALTHCHECK",
            "STOPSIGNAL", "ONBUILD")


@dataclass(frozen=True)
class Setting:
    """An instruction of :data:`SETTINGS` in its stage, in order (what it means is merged into
    the stage's :class:`ImageMetadata`; the docker backend's Dockerfile repeats it:
    ``dockerfile_render.py``)."""

    kind: str
    line: int
    text: str  # as written (continuations joined)


@dataclass
class ImageMetadata:
    """Image configuration a task's sandbox does not use, kept as parsed (see module doc)."""

    cmd: list[str] | None = None          # exec form, or [*shell, command] for shell form
    entrypoint: list[str] | None = None
    shell: list[str] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    exposed: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    healthcheck: str | None = None        # as written after HEALTHCHECK
    stopsignal: str | None = None
    onbuild: list[str] = field(default_factory=list)

    def copy(self) -> ImageMetadata:
        return replace(self, cmd=self.cmd and list(self.cmd), labels=dict(self.labels),
                       exposed=list(self.exposed), volumes=list(self.volumes),
                       onbuild=list(self.onbuild))


@dataclass
class Stage:
    """One FROM and the instructions up to the next FROM."""

    index: int
    name: str | None            # AS name (lower case), None if unnamed
    from_image: str             # the image (for FROM <stage>: that stage's image)
    from_line: int
    platform: str | None        # --platform as written, substituted
    steps: list[DockerStep] = field(default_factory=list)
    #: FROM <earlier stage>: its index (its steps come first: ParsedDockerfile.chain_steps)
    base_stage: int | None = None
    metadata: ImageMetadata = field(default_factory=ImageMetadata)
    env: dict[str, str] = field(default_factory=dict)   # ENV values at the stage's end
    shell: tuple[str, ...] = DEFAULT_SHELL
    #: its own SETTINGS instructions (not those of a stage it is built FROM)
    settings: list[Setting] = field(default_factory=list)


@dataclass
class ParsedDockerfile:
    origin: str
    from_image: str             # the final stage's (see Stage.from_image)
    from_line: int
    steps: list[DockerStep] = field(default_factory=list)   # the final stage's own steps
    #: the stages before the final one, in order (index = position)
    stages: list[Stage] = field(default_factory=list)
    metadata: ImageMetadata = field(default_factory=ImageMetadata)
    final: Stage | None = None
    #: things the user should know (e.g. a --platform not built): ``notices.notice`` them
    notices: list[str] = field(default_factory=list)

    def all_stages(self) -> list[Stage]:
        return [*self.stages, *([self.final] if self.final else [])]

    def chain_steps(self, index: int) -> list[DockerStep]:
        """The steps that make stage ``index`` from its root image: those of the stages it is
        built FROM first, then its own."""
        stage = self.all_stages()[index]
        below = [] if stage.base_stage is None else self.chain_steps(stage.base_stage)
        return [*below, *stage.steps]

    def needed_stages(self, index: int | None = None) -> list[int]:
        """Stages that stage ``index`` (default: the final one) copies from, transitively."""
        stages = self.all_stages()
        todo = [len(stages) - 1 if index is None else index]
        seen: set[int] = set()
        while todo:
            i = todo.pop()
            for st in self.chain_steps(i):
                if st.from_stage is not None and st.from_stage not in seen:
                    seen.add(st.from_stage)
                    todo.append(st.from_stage)
        return sorted(seen)


#: Official images we cannot pull, emulated on the Debian base by installing their runtime.
_EMULATED_IMAGES = {
    "python": "python3 python3-pip python3-venv python-is-python3",
    "node": "nodejs npm",
}


def image_emulation(from_image: str) -> str | None:
    """A RUN command that gives the Debian base what ``from_image`` is known for, if any."""
    name = from_image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]
    packages = _EMULATED_IMAGES.get(name)
    if packages is None and "python" in from_image:
        packages = _EMULATED_IMAGES["python"]
    if packages is None:
        return None
    # the official images' Python is not Debian's: no PEP 668 lock, so ``pip install`` works
    unlock = " && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED" if "python3" in packages else ""
    return (f"apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
            f"--no-install-recommends {packages} && rm -rf /var/lib/apt/lists/*{unlock}")


def emulation_steps(image: str, line: int) -> list[DockerStep]:
    """The steps a stage FROM ``image`` starts with on the Debian base (see image_emulation)."""
    emulate = image_emulation(image)
    return [] if emulate is None else [DockerStep("RUN", line, f"RUN {emulate}", (emulate,))]


def is_url(src: str) -> bool:
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", src) is not None or src.startswith("git@")


def local_refusals(parsed: ParsedDockerfile) -> list[str]:
    """What the local backend cannot build (file:line each): ADD of a URL."""
    out = []
    for stage in parsed.all_stages():
        for st in stage.steps:
            urls = [src for src in st.args[:-1] if is_url(src)] if st.add else []
            out += [f"{parsed.origin}:{st.line}: ADD from a URL ({src}) is not supported by the "
                    "local backend (it builds offline from the build context): download the file "
                    "into the environment directory, or use --backend docker" for src in urls]
    return out


def parse_dockerfile(text: str, origin: str, build_args: dict[str, str] | None = None) -> ParsedDockerfile:
    """Parse ``text`` (see the module doc); ARG/ENV values are substituted into later
    instructions. Raises LayerBuildError naming ``origin`` and the line."""
    from agentmeter.sandbox.dockerfile_parse import StageParser  # the instruction handlers

    return StageParser(origin, build_args or {}).parse(logical_lines(text, origin))


def shell_words(rest: str, where: str) -> list[str]:
    try:
        return shlex.split(rest)
    except ValueError as e:
        raise LayerBuildError(f"{where}: cannot parse {rest[:60]!r}: {e}") from None


def heredoc_script(command: str, docs: tuple[Heredoc, ...]) -> str:
    """A shell-form RUN with heredocs as one script for the shell."""
    return command + "\n" + "".join(f"{d.body}{d.word}\n" for d in docs)
