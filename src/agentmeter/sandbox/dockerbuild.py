"""Building the docker backend's layers: a script layer run in a container and committed, a
Dockerfile layer built by the classic builder from the parsed model (dockerfile_render.py), and
a failed build's message naming the step and the daemon's own error.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import tempfile
from pathlib import Path

from agentmeter.sandbox import droppings
from agentmeter.sandbox.dockerbridge import bridge_lost, bridge_refusal
from agentmeter.sandbox.dockercli import docker
from agentmeter.sandbox.dockerfile import ParsedDockerfile, parse_dockerfile
from agentmeter.sandbox.dockerfile_render import render_classic
from agentmeter.sandbox.dockerimage import image_config
from agentmeter.sandbox.output import strip_ansi
from agentmeter.sandbox.spec import LayerBuildError, LayerSpec
from agentmeter.sandbox.trust import BUILD_CA_ENV, BUILD_CA_PATH, host_ca_bundle

#: how many output lines a LayerBuildError shows
ERROR_TAIL_LINES = 20
_BUILD_NOISE = re.compile(r"^\s*(DEPRECATED: The legacy builder|BuildKit is currently|"
                          r"environment-variable\.|---> |Removing intermediate)")


#: what the daemon says when a build fails for a reason of its own, not the step's command:
#: a full disk, a lost bridge, a registry it cannot reach or that refuses, its own errors
_DAEMON_ERRORS = (
    re.compile(r"[^\n]*no space left on device[^\n]*", re.IGNORECASE),
    re.compile(r"[^\n]*could not find bridge [^\n]*|[^\n]*network bridge not found[^\n]*"),
    re.compile(r"[^\n]*(?:Get \"?https?://[^\n]*(?:dial tcp|no such host|i/o timeout|TLS handshake"
               r"|connection refused|timeout)|pull access denied|manifest for \S+ not found"
               r"|manifest unknown|toomanyrequests|error pulling image)[^\n]*"),
    re.compile(r"(?<=Error response from daemon: )[^\n]+"),
)
#: how much of the daemon's error the first line of a build failure shows
_DAEMON_ERROR_CHARS = 300


def daemon_error(output: str) -> str | None:
    """The daemon's own error in a failed build's output (the first kind of
    ``_DAEMON_ERRORS`` found, its last line), to name on the failure's first line; None when
    the output shows only a step's command failing."""
    for pattern in _DAEMON_ERRORS:
        found = pattern.findall(strip_ansi(output))
        if found:
            text = " ".join(found[-1].split()).removeprefix("Error response from daemon: ")
            return text if len(text) <= _DAEMON_ERROR_CHARS else \
                text[:_DAEMON_ERROR_CHARS - 1] + "…"
    return None


def build_failure(where: str, what: str, output: str) -> str:
    """A build failure's message: ``WHERE: WHAT`` (and the daemon's own error, when it has one,
    on that first line), then the output's tail."""
    cause = daemon_error(output)
    return f"{where}: {what}" + (f": {cause}" if cause else "") + f"\n{_tail(output)}"


def _tail(text: str, n: int = ERROR_TAIL_LINES) -> str:
    lines = [ln for ln in strip_ansi(text).splitlines() if ln.strip()]
    return "\n".join("  | " + ln for ln in lines[-n:])


def _network_flag(layer: LayerSpec) -> str:
    return "bridge" if layer.network == "full" else "none"


_FAIL_MARK = "__agentmeter_layer_failed__"
_SCRIPT_PATH = "/tmp/agentmeter-setup.sh"
_CONTEXT_DIR = "/tmp/agentmeter-context"
#: script layers run as root with errexit (like the local backend), in the build context when
#: there is one; the ERR trap names the failing line and command
_SCRIPT_WRAPPER = (
    f"cat > {_SCRIPT_PATH}; if [ -d {_CONTEXT_DIR} ]; then cd {_CONTEXT_DIR}; fi; "
    f"bash -eE -c "
    + shlex.quote(f"trap 'echo \"{_FAIL_MARK} $LINENO $BASH_COMMAND\" >&2' ERR; . {_SCRIPT_PATH}")
    + f" </dev/null; rc=$?; rm -rf {_SCRIPT_PATH} {_CONTEXT_DIR}; exit $rc"
)


async def build_script_layer(layer: LayerSpec, parent: str, tag: str, labels: list[str]) -> None:
    """Run the script as root in a container of ``parent`` and commit it as ``tag``."""
    name = f"agentmeter-build-{os.getpid()}-{tag.rpartition(':')[2][:12]}"
    await docker("rm", "-f", name, check=False)
    try:
        await docker("create", "-i", "--name", name, *labels, "-u", "0:0", "--entrypoint", "",
                     "--network", _network_flag(layer), parent, "bash", "-c", _SCRIPT_WRAPPER)
        if layer.context is not None:
            with droppings.clean_tree(layer.context) as context:  # no host bytecode caches
                await docker("cp", f"{context}/.", f"{name}:{_CONTEXT_DIR}")
        res = await docker("start", "-a", "-i", name, stdin=layer.source.encode(), check=False)
        if res.returncode != 0:
            out = res.text()
            where = ""
            for ln in reversed(out.splitlines()):
                if ln.startswith(_FAIL_MARK):
                    _, lineno, command = (ln.split(" ", 2) + ["", ""])[:3]
                    where = f":{lineno}: {command}"
                    break
            out = "\n".join(ln for ln in out.splitlines() if not ln.startswith(_FAIL_MARK))
            raise LayerBuildError(build_failure(f"{layer.origin}{where}",
                                                f"layer script failed (exit {res.returncode})",
                                                out))
        # the build ran as root; the image keeps its parent's USER
        user = (await image_config(parent)).user or "root"
        await docker("commit", "--change", 'CMD ["/bin/bash"]', "--change", f"USER {user}",
                     name, tag)
    finally:
        await docker("rm", "-f", name, check=False)


_CA_NAME = ".agentmeter-build-ca.crt"
#: RUN steps' shell while the host's CA bundle is lent: the usual variables point at it
_TRUST_SHELL = ("if [ -f {ca} ]; then export " + " ".join(f"{k}={{ca}}" for k in BUILD_CA_ENV)
                + "; fi; exec /bin/sh -c \"$0\" \"$@\"").replace("{ca}", BUILD_CA_PATH)
#: written after each image FROM while the bundle is lent: it is copied in (a public certificate
#: list, it stays in a lower layer: a later USER may not be able to remove it) and shell-form RUN
#: steps trust it; the image's shell is the default again at the end (dockerfile_render.py)
_TRUST_LINES = [f"COPY {_CA_NAME} {BUILD_CA_PATH}",
                "SHELL " + json.dumps(["/bin/sh", "-c", _TRUST_SHELL])]


def _rewrite_from(parsed: ParsedDockerfile, parent: str, trust: bool = False,
                  real_from: bool = False) -> tuple[str, list[tuple[int, str]]]:
    """``parsed`` for the classic builder (``dockerfile_render.py``) and (line, instruction) pairs
    to name a failed step's line. Every FROM image is built on ``parent`` (agentmeter's Debian
    base, with the packages of python/node images' runtimes), or with ``real_from`` the final
    stage on ``parent`` (its own image) and the other stages on their own images."""
    final = parsed.from_image

    def parent_of(image: str) -> str:
        return parent if not real_from or image == final else image

    return render_classic(parsed, parent_of, _TRUST_LINES if trust else None,
                          emulate=not real_from)


def _failed_step_line(output: str, steps: list[tuple[int, str]]) -> tuple[int, str] | None:
    """Map the last ``Step k/n : INSTR`` of a legacy build log to (line, instruction)."""
    norm = {" ".join(text.split()): line for line, text in steps}
    for ln in reversed(output.splitlines()):
        m = re.match(r"^Step \d+/\d+ : (.*)$", ln)
        if m:
            text = " ".join(m.group(1).split())
            return (norm[text], text) if text in norm else (0, text)
    return None


async def build_dockerfile_layer(layer: LayerSpec, parent: str, tag: str,
                                 labels: list[str], *, real_from: bool = False) -> None:
    """``docker build`` the Dockerfile with its FROM rewritten to ``parent``: the FROM image
    itself (``real_from``), else agentmeter's Debian base (plus the packages of the image's
    runtime, for python and node images)."""
    parsed = parse_dockerfile(layer.source, layer.origin)  # raises file:line for unsupported input
    ca = host_ca_bundle() if layer.network == "full" else None
    text, written = _rewrite_from(parsed, parent, trust=ca is not None, real_from=real_from)
    with tempfile.TemporaryDirectory(prefix="agentmeter-build-") as tmp:
        dockerfile = Path(tmp) / "Dockerfile"
        context = layer.context if layer.context is not None else Path(tmp) / "empty"
        context.mkdir(exist_ok=True)
        if ca is not None or droppings.contains(context):
            # a copy: without host bytecode caches, and lending the host's trust roots to
            # the RUN steps (sandbox/trust.py)
            lent = Path(tmp) / "context"
            shutil.copytree(context, lent, symlinks=True, ignore=droppings.ignore)
            if ca is not None:
                (lent / _CA_NAME).write_bytes(ca)
            context = lent
        dockerfile.write_text(text)
        res = await docker("build", "--force-rm", "--network", _network_flag(layer), *labels,
                           "-t", tag, "-f", str(dockerfile), str(context),
                           env={"DOCKER_BUILDKIT": "0"}, check=False)
    if res.returncode != 0:
        out = res.text()
        out = "\n".join(ln for ln in out.splitlines() if not _BUILD_NOISE.match(ln))
        step = _failed_step_line(out, written)
        where = f"{layer.origin}:{step[0]}: {step[1]}" if step and step[0] else layer.origin
        if step and not step[0]:
            where += f": {step[1]}"
        raise LayerBuildError(build_failure(where, "docker build failed", out))


async def build_layer(layer: LayerSpec, parent: str, tag: str, labels: list[str], *,
                      real_from: bool = False) -> None:
    """Build ``layer`` on ``parent`` as ``tag``, within the layer's build timeout if it has one."""
    if layer.network == "full" and (refusal := bridge_refusal()):
        raise LayerBuildError(f"{layer.origin}: {refusal}")

    async def build() -> None:
        for attempt in (1, 2):
            try:
                if layer.kind == "script":
                    await build_script_layer(layer, parent, tag, labels)
                else:
                    await build_dockerfile_layer(layer, parent, tag, labels, real_from=real_from)
                return
            except LayerBuildError as e:
                # the daemon's bridge lost under it: made again once (check_bridge), else named
                lost = await bridge_lost(str(e)) if attempt == 1 else None
                if lost is None:
                    raise
                if lost:
                    raise LayerBuildError(f"{layer.origin}: {lost}") from e

    try:
        await asyncio.wait_for(build(), layer.build_timeout_s)
    except TimeoutError:
        raise LayerBuildError(f"{layer.origin}: the environment build took longer than its "
                              f"build_timeout_sec ({layer.build_timeout_s:g}s)") from None
