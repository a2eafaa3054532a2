"""One Dockerfile model for both backends: what the docker backend's builder is given
(``dockerfile_render.py``, written from the parsed model) parses back to the model the local
backend builds (``layers.py``), for every Dockerfile of Harbor's example corpus and for the
instructions the corpus does not use. Parsing only: no sandbox, no daemon."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentmeter.sandbox.dockerfile import (
    DEFAULT_SHELL,
    DockerStep,
    ParsedDockerfile,
    local_refusals,
    parse_dockerfile,
)
from agentmeter.sandbox.dockerfile_render import render_classic
from agentmeter.sandbox.spec import LayerBuildError

CORPUS = Path(os.environ.get("AGENTMETER_HARBOR_CORPUS",
                             Path(__file__).resolve().parents[2] / "shared" / "corpora"
                             / "harbor-examples"))

#: what the corpus does not use, in the forms the classic builder takes without lowering
MORE = """\
ARG BASE=debian:trixie
ARG V=global
FROM ${BASE} AS build
ARG V
ARG W="two words $V"
ENV A=1 B="with space" C=$V
ENV D ${W:-none}
WORKDIR /src
WORKDIR sub
USER 1000:1000
RUN echo "$W" > out
RUN ["/bin/echo", "exec form"]
SHELL ["/bin/bash", "-c"]
RUN <<EOF
echo heredoc $A
EOF
FROM build
USER root
FROM debian:trixie
LABEL a=b "c d"="e $V" price=\\$5
EXPOSE 80 443/tcp
VOLUME ["/data"]
COPY --from=build --chown=1:1 /src/sub/out /x
COPY --from=0 /src /y/
ADD ctx.tar /opt/
STOPSIGNAL SIGINT
HEALTHCHECK --interval=5s CMD true
ONBUILD RUN echo later
MAINTAINER someone
CMD echo shell form
ENTRYPOINT ["/bin/sh", "-c"]
"""


def _meaning(p: ParsedDockerfile) -> list[object]:
    """What a build does with ``p``: per stage its image, parent stage, steps (a RUN as the
    argv it runs, a COPY --from by the image or stage it copies from), ENV at its end, metadata
    and settings (lines and stage names left out; the stages the renderer adds for the images
    COPY --from names count as those images)."""
    stages = p.all_stages()
    added = [s.index for s in stages if (s.name or "").startswith("agentmeter-image-")]

    def source(st: DockerStep) -> object:
        if st.from_stage is None:
            return st.from_image
        if st.from_stage in added:
            return stages[st.from_stage].from_image
        return st.from_stage - len(added)

    out: list[object] = []
    for s in stages:
        if s.index in added:
            continue
        steps = []
        for st in s.steps:
            if st.kind == "RUN":
                argv = list(st.args) if st.exec_form else [*(st.shell or DEFAULT_SHELL), st.args[0]]
                steps.append(("RUN", argv, st.mkdirs))
            else:
                steps.append((st.kind, st.args, st.chown, st.chmod, source(st), st.add, st.inline))
        out.append((s.from_image, s.base_stage, steps, s.env, s.shell, s.metadata,
                    [(x.kind, x.text) for x in s.settings]))
    return out


def _round_trip(text: str, origin: str) -> None:
    parsed = parse_dockerfile(text, origin)
    rendered, written = render_classic(parsed, lambda image: image, emulate=False)
    again = parse_dockerfile(rendered, f"{origin} (rendered)")
    assert _meaning(again) == _meaning(parsed), rendered
    assert {line for line, _ in written} <= {ll for ll in range(1, text.count("\n") + 2)}


def _corpus() -> list[Path]:
    return sorted(p for p in CORPUS.rglob("Dockerfile*") if p.is_file())


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"Harbor's example corpus is not at {CORPUS}")
def test_every_corpus_dockerfile_parses_and_round_trips() -> None:
    files = _corpus()
    assert len(files) >= 60
    refused = {}
    for path in files:
        try:
            parsed = parse_dockerfile(path.read_text(), str(path))
        except LayerBuildError as e:  # refused: the reason names the file and line
            assert str(e).startswith(f"{path}:"), e
            refused[path] = str(e)
            continue
        assert all(r.startswith(f"{path}:") for r in local_refusals(parsed))
        _round_trip(path.read_text(), str(path))
    assert refused == {}  # every one of Harbor's examples is understood


def test_what_the_corpus_does_not_use_round_trips() -> None:
    _round_trip(MORE, "more/Dockerfile")
    p = parse_dockerfile(MORE, "more/Dockerfile")
    build, derived = p.stages
    assert [st.args for st in build.steps if st.kind in ("ARG", "ENV")] == [
        ("V", "global"), ("W", "two words global"),
        ("A", "1", "B", "with space", "C", "global"), ("D", "two words global")]
    assert p.metadata.labels == {"a": "b", "c d": "e ", "price": "$5", "maintainer": "someone"}
    rendered, _ = render_classic(p, lambda image: "PARENT")
    assert 'ARG W="two words global"' in rendered.splitlines()
    assert derived.settings == [] and [s.kind for s in p.final.settings if p.final] == [
        "LABEL", "EXPOSE", "VOLUME", "STOPSIGNAL", "HEALTHCHECK", "ONBUILD", "MAINTAINER", "CMD",
        "ENTRYPOINT"]


def test_the_rendered_value_of_an_arg_is_not_expanded_again() -> None:
    p = parse_dockerfile('FROM debian:trixie\nARG P="a\\\\$b \\"q\\""\nRUN echo "$P"\n', "D")
    assert p.steps[0].args == ("P", 'a$b "q"')
    rendered, _ = render_classic(p, lambda image: image, emulate=False)
    assert 'ARG P="a\\$b \\"q\\""' in rendered.splitlines()
    assert parse_dockerfile(rendered, "R").steps[0].args == p.steps[0].args
