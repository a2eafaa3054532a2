"""The Dockerfile grammar Harbor and Terminal-Bench tasks use: parsed (every instruction, errors
naming file and line) and built on the local backend (multi-stage COPY --from, FROM --platform,
SHELL, heredocs, ADD of a tar archive), and run through ``agentmeter run`` on both backends."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

import pytest
from taskgen import make_task

from agentmeter.records import TrialStatus
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.sandbox.dockerfile import HOST_PLATFORM, local_refusals, parse_dockerfile
from agentmeter.sandbox.dockerfile_render import render_classic
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.spec import LayerBuildError, LayerSpec, SandboxSpec
from agentmeter.store.db import Store

EVERYTHING = """\
# syntax=docker/dockerfile:1
ARG BASE=debian:trixie
FROM --platform=$BUILDPLATFORM ${BASE} AS build
ARG BASE
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN --mount=type=cache,target=/root/.cache --network=none mkdir -p /out && \\
    echo "$BASE" > /out/base
RUN <<EOF
echo one
EOF
FROM build AS test
RUN echo inherits-shell
FROM python:3.12
MAINTAINER someone
COPY --from=build /out/base /etc/base
COPY --from=0 /out /opt/out
COPY --chown=nobody:nogroup --chmod=640 <<EOF /etc/app.conf
key=${BASE:-unset}
EOF
COPY --from=busybox:1.36 /bin/sh /opt/sh
EXPOSE 80 443/tcp
LABEL org.example.a=b "with space"="c d"
CMD ["bash", "-l"]
ENTRYPOINT python app.py
HEALTHCHECK --interval=5s CMD curl -f http://localhost/ || exit 1
STOPSIGNAL SIGTERM
VOLUME ["/data"]
ONBUILD RUN echo later
RUN [ -f /etc/base ] && echo shell-form-with-brackets
"""


def test_every_instruction_parses() -> None:
    p = parse_dockerfile(EVERYTHING, "t/Dockerfile")
    build, test = p.stages
    assert (build.name, build.from_image, build.platform) == ("build", "debian:trixie", HOST_PLATFORM)
    assert (test.name, test.base_stage, test.from_image) == ("test", 0, "debian:trixie")
    assert p.final is not None and p.final.index == 2 and p.final.name is None
    assert (p.from_image, p.from_line) == ("python:3.12", 13)
    arg, run1, run2 = build.steps
    assert arg.args == ("BASE", "debian:trixie")  # a global ARG, declared again in the stage
    assert run1.shell == ("/bin/bash", "-o", "pipefail", "-c") and run1.offline
    assert run1.mkdirs == ("/root/.cache",) and run1.args == ('mkdir -p /out && echo "$BASE" > /out/base',)
    assert run2.args == ("echo one\n",) and run2.shell == run1.shell
    assert test.steps[0].shell == run1.shell  # FROM <stage> keeps its SHELL
    assert [s.kind for s in p.chain_steps(1)] == ["ARG", "RUN", "RUN", "RUN"]
    emulate, c1, c2, c3, c4, last = p.steps
    assert emulate.kind == "RUN" and "python3" in emulate.args[0]
    assert (c1.from_stage, c1.args) == (0, ("/out/base", "/etc/base"))
    assert (c2.from_stage, c2.args) == (0, ("/out", "/opt/out"))
    assert (c3.inline, c3.args, c3.chown, c3.chmod) == (
        (("EOF", "key=unset\n"),), ("/etc/app.conf",), "nobody:nogroup", "640")
    assert (c4.from_stage, c4.from_image) == (None, "busybox:1.36")
    assert last.args == ("[ -f /etc/base ] && echo shell-form-with-brackets",) and not last.exec_form
    assert p.needed_stages() == [0]
    m = p.metadata
    assert m.exposed == ["80", "443/tcp"] and m.volumes == ["/data"]
    assert m.labels == {"maintainer": "someone", "org.example.a": "b", "with space": "c d"}
    assert m.cmd == ["bash", "-l"] and m.entrypoint == ["/bin/sh", "-c", "python app.py"]
    assert m.healthcheck is not None and m.healthcheck.startswith("--interval=5s CMD")
    assert (m.stopsignal, m.onbuild) == ("SIGTERM", ["RUN echo later"])
    assert p.notices == []


def test_args_follow_dockers_scope_rules() -> None:
    text = ("ARG V=global\nFROM debian:trixie AS a\nWORKDIR /w$V\nARG V\nWORKDIR /w$V\n"
            "FROM debian:trixie\nARG V=own\nWORKDIR /w$V\n")
    p = parse_dockerfile(text, "D")
    assert [s.args for s in p.chain_steps(0)] == [("/w",), ("V", "global"), ("/wglobal",)]
    assert [s.args for s in p.steps] == [("V", "own"), ("/wown",)]
    assert parse_dockerfile(text, "D", {"V": "cli"}).steps[0].args == ("V", "cli")


def test_platform_notice_and_heredoc_forms() -> None:
    p = parse_dockerfile("FROM --platform=linux/s390x debian:trixie\n"
                         "RUN <<'EOF'\n#!/usr/bin/env python3\nprint('x')\nEOF\n"
                         "RUN cat <<EOF > /x\n\tindented $HOME\nEOF\n", "D")
    assert p.notices == [f"D:1: FROM --platform=linux/s390x debian:trixie: built for this host's "
                         f"{HOST_PLATFORM}"]
    script, cat = p.steps
    assert script.exec_form and script.args[-1] == "#!/usr/bin/env python3\nprint('x')\n"
    assert cat.args == ("cat <<EOF > /x\n\tindented $HOME\nEOF\n",)


def test_add_url_refused_on_local_only() -> None:
    p = parse_dockerfile("FROM debian:trixie\nADD https://example.org/x.tgz /opt/\n", "e/Dockerfile")
    assert local_refusals(p) == ["e/Dockerfile:2: ADD from a URL (https://example.org/x.tgz) is not "
                                 "supported by the local backend (it builds offline from the build "
                                 "context): download the file into the environment directory, or use "
                                 "--backend docker"]


@pytest.mark.parametrize(("text", "message"), [
    ('FROM debian:trixie\nRUN ["echo", \n', r"D:2: RUN exec form is not a JSON list"),
    ('FROM debian:trixie\nCMD ["a", 1]\n', r"D:2: CMD exec form must be a JSON list of strings"),
    ("FROM debian:trixie AS b\nFROM debian:trixie\nCOPY --from=bulid /x /y\n",
     r"D:3: COPY --from=bulid: no earlier stage is named 'bulid' \(stages: b\)"),
    ("FROM debian:trixie AS b\nCOPY --from=1 /x /y\n", r"D:2: COPY --from=1: stage 1 is not an earlier"),
    ("FROM debian:trixie AS b\nFROM debian:trixie AS B\n",
     r"D:2: stage name 'b' is already used by the stage at line 1"),
    ("FROM debian:trixie\nFOO bar\n", r"D:2: unknown Dockerfile instruction 'FOO'"),
    ("RUN true\n", r"D:1: RUN before FROM"),
    ("FROM debian:trixie\nRUN <<EOF\necho\n", r"D:2: heredoc <<EOF has no closing EOF line"),
    ("FROM debian:trixie\nRUN --mount=type=secret,id=x cat /run/secrets/x\n",
     r"D:2: RUN --mount=type=secret,id=x: only type=cache and type=tmpfs"),
    ("FROM debian:trixie\nSHELL /bin/bash -c\n", r"D:2: SHELL needs the JSON form"),
    ("FROM debian:trixie\nEXPOSE http\n", r"D:2: EXPOSE http: not a port"),
    ("FROM --foo=1 debian:trixie\n", r"D:1: FROM flag --foo is not supported"),
    ("FROM debian:trixie AS\n", r"D:1: FROM needs an image name"),
    ("FROM debian:trixie\nCOPY https://example.org/x /x\n", r"D:2: COPY from a URL"),
])
def test_bad_dockerfiles_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(LayerBuildError, match=message):
        parse_dockerfile(text, "D")


MULTI_STAGE = """\
ARG TOOL=tool
FROM --platform=$BUILDPLATFORM debian:trixie AS build
ARG TOOL
ARG SAY="echo $TOOL"
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN mkdir -p /out && printf '#!/bin/sh\\n%s {marker}\\n' "$SAY" > /out/$TOOL && chmod 750 /out/tool
RUN false | true && echo pipefail-off > /out/shell || echo pipefail-on > /out/shell
RUN useradd -u 4321 builder && echo owned > /out/owned && chown builder /out/owned
FROM debian:trixie
EXPOSE 8080
LABEL purpose=test
CMD ["sleep", "infinity"]
ENTRYPOINT ["/bin/sh", "-c"]
HEALTHCHECK CMD true
STOPSIGNAL SIGINT
VOLUME /data
WORKDIR /app
COPY --from=build /out/tool /usr/local/bin/tool
COPY --from=build /out/shell /out/owned ./
COPY <<EOF /app/heredoc.txt
made by a heredoc
EOF
ADD archive.tar.gz /opt/unpacked/
COPY --chown=nobody:nogroup --chmod=600 ctx.txt /app/ctx.txt
"""


def _archive(path: Path) -> None:
    with tarfile.open(path, "w:gz") as tar:
        data = b"from the archive\n"
        info = tarfile.TarInfo("inner/file.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def _environment(root: Path, marker: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "Dockerfile").write_text(MULTI_STAGE.format(marker=marker))
    (root / "ctx.txt").write_text("context file\n")
    _archive(root / "archive.tar.gz")
    return root


async def test_multi_stage_build_on_local(local_backend: LocalBackend, tmp_path: Path) -> None:
    marker = f"m{time.time_ns()}"
    ctx = _environment(tmp_path / "env", marker)
    layer = LayerSpec(kind="dockerfile", source=(ctx / "Dockerfile").read_text(),
                      origin=str(ctx / "Dockerfile"), context=ctx)
    spec = SandboxSpec(layers=(layer,))
    built: list[str] = []
    local_backend.layers.log = built.append
    try:
        await local_backend.prepare(spec)
        assert any("RUN mkdir -p /out" in b for b in built)  # the build stage was built
        built.clear()
        await local_backend.prepare(spec)
        assert [b for b in built if b.startswith("building")] == []  # and every step cached
    finally:
        local_backend.layers.log = None
    sb = await local_backend.start(spec)
    try:
        r = await sb.exec("tool; stat -c '%a %U' /usr/local/bin/tool; cat shell; "
                          "stat -c '%u %U' owned; cat heredoc.txt /opt/unpacked/inner/file.txt; "
                          "stat -c '%a %U:%G' ctx.txt; test -e /out || echo no-build-stage-files",
                          user="root")
        assert r.stdout.splitlines() == [
            f"tool {marker}", "750 root", "pipefail-on", "4321 UNKNOWN", "made by a heredoc",
            "from the archive", "600 nobody:nogroup", "no-build-stage-files"], r.stdout + r.stderr
        assert (await sb.exec("tool", user="agent")).exit_code != 0  # 750 root: not for agent
    finally:
        await sb.stop()


async def test_copy_from_a_missing_path_names_the_line(local_backend: LocalBackend,
                                                       tmp_path: Path) -> None:
    text = f"FROM debian:trixie AS a\nRUN echo {time.time_ns()} > /a\nFROM debian:trixie\n" \
           "COPY --from=a /nothere /x\n"
    layer = LayerSpec(kind="dockerfile", source=text, origin="m/Dockerfile", context=tmp_path)
    with pytest.raises(LayerBuildError, match=r"m/Dockerfile:4: COPY --from: finding the sources "
                                              r"failed: /nothere: no such file or directory"):
        await local_backend.prepare(SandboxSpec(layers=(layer,)))


def _stage_task(root: Path, marker: str) -> Path:
    task = make_task(root, "multi-stage", dockerfile="FROM debian:trixie\n",
                     solve="tool > /app/done",
                     test="#!/bin/bash\nmkdir -p /logs/verifier\n"
                          f"if [ \"$(cat /app/done 2>/dev/null)\" = 'tool {marker}' ]; then "
                          "echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
    env = _environment(task / "environment", marker)
    with (env / "Dockerfile").open("a") as f:
        f.write("RUN chmod 755 /usr/local/bin/tool\n")  # the oracle runs as the agent user
    return root


async def test_multi_stage_task_passes_its_oracle_and_nop_fails(tmp_path: Path) -> None:
    suite = _stage_task(tmp_path / "suite", f"m{time.time_ns()}")
    store = Store.open(tmp_path / "runs")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(suite)], agents=["oracle", "nop"])))
    configs = {c.id: c.agent.name for c in store.run_configs(rid)}
    result = {configs[t.config_id]: (t.status, t.error) for t in store.latest_completed_trials(rid)}
    assert result == {"oracle": (TrialStatus.PASSED, None), "nop": (TrialStatus.FAILED, None)}


@pytest.mark.docker
async def test_multi_stage_task_passes_its_oracle_on_docker(tmp_path: Path,
                                                             docker_daemon: object) -> None:
    suite = _stage_task(tmp_path / "suite", f"m{time.time_ns()}")
    store = Store.open(tmp_path / "runs")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(suite)], agents=["oracle"],
                                                 backend="docker")))
    trials = store.latest_completed_trials(rid)
    assert [(t.status, t.error) for t in trials] == [(TrialStatus.PASSED, None)]


def test_docker_backend_rewrite_for_the_classic_builder() -> None:
    """The docker backend's builder has no BuildKit: stages named, FROM images replaced,
    --platform dropped, heredocs and --chmod rewritten as RUN steps, the CA lent per stage."""
    text = MULTI_STAGE.format(marker="x") + "COPY --from=busybox:1.36 /bin/sh /opt/sh\n"
    out, written = render_classic(parse_dockerfile(text, "D"), lambda image: "PARENT",
                                  ["COPY ca /ca"])
    lines = out.splitlines()
    assert [ln for ln in lines if ln.startswith("FROM")] == [
        "FROM PARENT AS agentmeter-image-0", "FROM PARENT AS build",
        "FROM PARENT AS agentmeter-stage-1"]
    assert lines.count("COPY ca /ca") == 3 and "--platform" not in out and "<<" not in out
    assert 'COPY --from=build ["/out/tool", "/usr/local/bin/tool"]' in lines
    assert 'COPY --from=agentmeter-image-0 ["/bin/sh", "/opt/sh"]' in lines
    assert 'RUN ["chmod", "-R", "600", "--", "/app/ctx.txt"]' in lines
    assert any(ln.startswith('RUN ["/bin/sh", "-c"') and "made by a heredoc" in ln for ln in lines)
    assert (18, 'COPY --from=build ["/out/tool", "/usr/local/bin/tool"]') in written
    assert 'ARG TOOL="tool"' in lines and 'ARG SAY="echo tool"' in lines  # the global scope resolved
