"""The docker backend's Dockerfile, written from the parsed model (``dockerfile.py``) for its
builder (``dockerbuild.py``).

The backend builds with Docker's classic builder (``DOCKER_BUILDKIT=0``: no buildx needed),
which knows multi-stage builds but not BuildKit's additions, and every FROM image becomes the
image the backend builds on (``parent_of``). Nothing is read from the Dockerfile's text here:
each stage and step comes from :class:`~agentmeter.sandbox.dockerfile.ParsedDockerfile`, the
model the local backend builds from (``layers.py``), so both backends build the same steps:

- each stage's FROM names ``parent_of(image)`` (``FROM <stage>`` kept), every stage named, and
  ``COPY --from=<index>`` refers to that name; ``COPY --from=<image>`` copies from a stage
  ``FROM parent_of(image)`` added before the first FROM;
- ``--platform`` is dropped (the host's platform is built); the image emulation steps of the
  model (python/node runtimes on the Debian base) are written unless ``emulate`` is off;
- ARG steps are written with the value the model gave them (the global ARG scope resolved);
  ENV, WORKDIR, USER and the configuration instructions (``Setting``: CMD, ENTRYPOINT, LABEL,
  …) as the model recorded them, where docker expands them against the real image's ENV;
- RUN heredocs become exec-form RUNs of the same script with the stage's SHELL; ``RUN --mount``
  cache/tmpfs directories are made before the command, ``RUN --network`` is dropped (the layer's
  network applies);
- ``COPY <<EOF`` becomes a RUN writing the file; ``--chmod`` a RUN chmod of the copied paths
  after the COPY; ``--link`` is dropped;
- with ``trust`` (the host's CA bundle lent to the build: ``trust.py``), after each image FROM
  the bundle is copied in and shell-form RUNs run through ``trust`` (a SHELL), reset at the end.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from agentmeter.sandbox.dockerfile import (
    DEFAULT_SHELL,
    DockerStep,
    ParsedDockerfile,
    Setting,
    Stage,
    emulation_steps,
)

_WRITE = ('mkdir -p "$(dirname -- "$1")" && printf %s "$2" > "$1"'
          ' && { [ -z "$3" ] || chown -- "$3" "$1"; } && { [ -z "$4" ] || chmod -- "$4" "$1"; }')


def quote_word(value: str) -> str:
    """``value`` as one double-quoted word of an instruction docker expands (ARG, ENV, LABEL):
    no variable in it is expanded again."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def stage_name(parsed: ParsedDockerfile, index: int) -> str:
    return parsed.all_stages()[index].name or f"agentmeter-stage-{index}"


def _targets(st: DockerStep, dest: str) -> list[str]:
    sources = st.args[:-1]
    into = dest.endswith("/") or len(sources) + len(st.inline) > 1
    return [f"{dest.rstrip('/')}/{s.rstrip('/').rsplit('/', 1)[-1]}" if into else dest
            for s in sources]


def _copy(st: DockerStep, parsed: ParsedDockerfile, images: dict[str, str]) -> list[str]:
    out = []
    dest = st.args[-1]
    flags = [f"--chown={st.chown}"] if st.chown else []
    if st.from_stage is not None:
        flags.append(f"--from={stage_name(parsed, st.from_stage)}")
    elif st.from_image is not None:
        flags.append(f"--from={images[st.from_image]}")
    if st.args[:-1]:
        word = "ADD" if st.add else "COPY"
        out.append(" ".join([word, *flags, json.dumps(list(st.args))]))
        if st.chmod:
            out.append("RUN " + json.dumps(["chmod", "-R", st.chmod, "--", *_targets(st, dest)]))
    for name, content in st.inline:
        target = f"{dest.rstrip('/')}/{name}" if dest.endswith("/") or len(st.inline) > 1 else dest
        out.append("RUN " + json.dumps(["/bin/sh", "-c", _WRITE, "sh", target, content,
                                        st.chown or "", st.chmod or ""]))
    return out


def _run(st: DockerStep) -> list[str]:
    out = ["RUN " + json.dumps(["mkdir", "-p", "--", *st.mkdirs])] if st.mkdirs else []
    if st.exec_form or "\n" in st.args[0]:
        argv = list(st.args) if st.exec_form else [*(st.shell or DEFAULT_SHELL), st.args[0]]
        return [*out, "RUN " + json.dumps(argv)]
    return [*out, f"RUN {st.args[0]}"]


def render_step(st: DockerStep, parsed: ParsedDockerfile, images: dict[str, str]) -> list[str]:
    """The classic builder's instructions for one step of the model."""
    if st.kind == "RUN":
        return _run(st)
    if st.kind == "COPY":
        return _copy(st, parsed, images)
    if st.kind == "ARG":
        return [f"ARG {k}={quote_word(v)}" for k, v in zip(st.args[::2], st.args[1::2], strict=True)]
    return [st.text]  # ENV, WORKDIR, USER: docker expands them against the image's own ENV


def _body(stage: Stage, emulate: bool) -> list[DockerStep | Setting]:
    """The stage's steps and settings in the order written; without ``emulate`` the image
    emulation steps (those of its FROM line) are left out."""
    steps: list[DockerStep | Setting] = [
        st for st in stage.steps
        if emulate or stage.base_stage is not None or st.line != stage.from_line]
    return sorted([*steps, *stage.settings], key=lambda item: item.line)


def render_classic(parsed: ParsedDockerfile, parent_of: Callable[[str], str],
                   trust: list[str] | None = None,
                   emulate: bool = True) -> tuple[str, list[tuple[int, str]]]:
    """The Dockerfile of ``parsed`` for the classic builder; also (source line, instruction)
    for each instruction written, to name the line a failed step came from. ``trust``: lines
    that lend the CA bundle to a stage (written after each image FROM; see module doc);
    ``emulate``: the images are mapped onto the Debian base, so python/node images get their
    runtime's packages."""
    stages = parsed.all_stages()
    images: dict[str, str] = {}
    for s in stages:
        for st in s.steps:
            if st.from_image is not None and st.from_image not in images:
                images[st.from_image] = f"agentmeter-image-{len(images)}"
    out: list[tuple[int, str]] = []
    first = stages[0].from_line
    for image, name in images.items():  # the images COPY --from names, as stages of their own
        out.append((first, f"FROM {parent_of(image)} AS {name}"))
        out += [(first, t) for t in trust or ()]
        if emulate:
            out += [(first, t) for st in emulation_steps(image, first) for t in _run(st)]
    for stage in stages:
        name = stage_name(parsed, stage.index)
        if stage.base_stage is not None:
            out.append((stage.from_line, f"FROM {stage_name(parsed, stage.base_stage)} AS {name}"))
        else:
            out.append((stage.from_line, f"FROM {parent_of(stage.from_image)} AS {name}"))
            out += [(stage.from_line, t) for t in trust or ()]
        for item in _body(stage, emulate):
            lines = [item.text] if isinstance(item, Setting) else render_step(item, parsed, images)
            out += [(item.line, t) for t in lines]
    if trust:
        out.append((0, "SHELL " + json.dumps(list(DEFAULT_SHELL))))
    return "".join(f"{t}\n" for _, t in out), out
