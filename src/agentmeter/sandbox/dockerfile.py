"""The Dockerfile subset the local backend builds: FROM, RUN, WORKDIR, ENV, COPY/ADD of local
files, USER and ARG. Anything else is an error that names the file and line."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Literal

from agentmeter.sandbox.spec import LayerBuildError

SUPPORTED = ("FROM", "RUN", "WORKDIR", "ENV", "COPY", "ADD", "USER", "ARG")

StepKind = Literal["RUN", "COPY", "WORKDIR", "ENV", "USER", "ARG"]


@dataclass(frozen=True)
class DockerStep:
    kind: StepKind
    line: int
    text: str  # the instruction as written (after continuation joining), for cache keys and errors
    #: RUN: [command] for shell form or argv for exec form; COPY: [*sources, dest];
    #: WORKDIR/USER: [value]; ENV/ARG: [k1, v1, k2, v2, ...]
    args: tuple[str, ...]
    exec_form: bool = False
    chown: str | None = None
    chmod: str | None = None


@dataclass
class ParsedDockerfile:
    origin: str
    from_image: str
    from_line: int
    steps: list[DockerStep] = field(default_factory=list)


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def substitute(value: str, variables: dict[str, str]) -> str:
    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        default = m.group(2)
        if name in variables:
            return variables[name]
        return default if default is not None else ""

    return _VAR.sub(repl, value)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations; drop comments and blank lines. Returns (first line no, text)."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for no, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment lines inside a continuation are skipped, as docker does
        if not buf:
            start = no
        if raw.rstrip().endswith("\\"):
            buf.append(raw.rstrip()[:-1])
            continue
        buf.append(raw)
        out.append((start, " ".join(s.strip() for s in buf).strip()))
        buf = []
    if buf:
        out.append((start, " ".join(s.strip() for s in buf).strip()))
    return out


def _split_kv(rest: str, origin: str, line: int) -> list[tuple[str, str]]:
    try:
        words = shlex.split(rest)
    except ValueError as e:
        raise LayerBuildError(f"{origin}:{line}: cannot parse ENV: {e}") from None
    if words and "=" not in words[0]:
        # legacy form: ENV key value with spaces
        key, _, value = rest.strip().partition(" ")
        return [(key, value.strip())]
    pairs = []
    for w in words:
        if "=" not in w:
            raise LayerBuildError(f"{origin}:{line}: ENV/ARG item {w!r} is not KEY=VALUE")
        k, _, v = w.partition("=")
        pairs.append((k, v))
    return pairs


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
    return (f"apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
            f"--no-install-recommends {packages} && rm -rf /var/lib/apt/lists/*")


def parse_dockerfile(text: str, origin: str, build_args: dict[str, str] | None = None) -> ParsedDockerfile:
    """Parse ``text``; ARG/ENV values are substituted into later instructions."""
    variables: dict[str, str] = {}
    args = dict(build_args or {})
    parsed: ParsedDockerfile | None = None
    for line, logical in _logical_lines(text):
        word, _, rest = logical.partition(" ")
        instr = word.upper()
        rest = rest.strip()
        if instr not in SUPPORTED:
            raise LayerBuildError(
                f"{origin}:{line}: unsupported Dockerfile instruction {word!r} "
                f"(supported: {', '.join(SUPPORTED)})"
            )
        if instr == "ARG":
            flat_args: list[str] = []
            for k, v in _split_kv(rest, origin, line) if "=" in rest else [(rest, "")]:
                variables[k] = args.get(k, substitute(v, variables))
                flat_args += [k, variables[k]]
            if parsed is not None:  # build-time variables for later RUN steps (not persisted)
                parsed.steps.append(DockerStep("ARG", line, logical, tuple(flat_args)))
            continue
        if instr == "FROM":
            if parsed is not None:
                raise LayerBuildError(
                    f"{origin}:{line}: multi-stage builds (a second FROM) are not supported")
            image = substitute(rest, variables).split()
            if not image or any(w.startswith("--") for w in image) or len(image) not in (1, 3):
                raise LayerBuildError(f"{origin}:{line}: FROM needs one image name")
            parsed = ParsedDockerfile(origin=origin, from_image=image[0], from_line=line)
            emulate = image_emulation(image[0])
            if emulate is not None:
                parsed.steps.append(DockerStep("RUN", line, f"RUN {emulate}", (emulate,)))
            continue
        if parsed is None:
            raise LayerBuildError(f"{origin}:{line}: {instr} before FROM")
        if instr == "RUN":
            if rest.startswith("["):
                try:
                    argv = json.loads(rest)
                except json.JSONDecodeError as e:
                    raise LayerBuildError(f"{origin}:{line}: RUN exec form is not a JSON list: {e}") from None
                if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                    raise LayerBuildError(f"{origin}:{line}: RUN exec form must be a list of strings")
                parsed.steps.append(DockerStep("RUN", line, logical, tuple(argv), exec_form=True))
            else:
                if rest.startswith("--"):
                    raise LayerBuildError(f"{origin}:{line}: RUN flags ({rest.split()[0]}) are not supported")
                parsed.steps.append(DockerStep("RUN", line, logical, (rest,)))
        elif instr in ("COPY", "ADD"):
            words = shlex.split(rest) if not rest.startswith("[") else json.loads(rest)
            chown = chmod = None
            while words and words[0].startswith("--"):
                flag, _, val = words.pop(0).partition("=")
                if flag == "--chown":
                    chown = substitute(val, variables)
                elif flag == "--chmod":
                    chmod = val
                else:
                    raise LayerBuildError(f"{origin}:{line}: {instr} flag {flag} is not supported")
            if len(words) < 2:
                raise LayerBuildError(f"{origin}:{line}: {instr} needs a source and a destination")
            words = [substitute(w, variables) for w in words]
            for src in words[:-1]:
                if re.match(r"^[a-z]+://", src):
                    raise LayerBuildError(f"{origin}:{line}: {instr} from a URL ({src}) is not supported; "
                                          "only local files in the build context")
            parsed.steps.append(DockerStep("COPY", line, logical, tuple(words), chown=chown, chmod=chmod))
        elif instr == "ENV":
            flat: list[str] = []
            for k, v in _split_kv(rest, origin, line):
                v = substitute(v, variables)
                variables[k] = v
                flat += [k, v]
            parsed.steps.append(DockerStep("ENV", line, logical, tuple(flat)))
        elif instr in ("WORKDIR", "USER"):
            if not rest:
                raise LayerBuildError(f"{origin}:{line}: {instr} needs a value")
            parsed.steps.append(DockerStep(instr, line, logical, (substitute(rest, variables),)))  # type: ignore[arg-type]
    if parsed is None:
        raise LayerBuildError(f"{origin}: no FROM instruction")
    return parsed
