"""The instruction handlers behind ``dockerfile.parse_dockerfile`` (what each instruction means:
see ``dockerfile.py``'s module doc)."""

from __future__ import annotations

import re

from agentmeter.sandbox.dockerfile import (
    DEFAULT_SHELL,
    HOST_PLATFORM,
    INSTRUCTIONS,
    PLATFORM_ARGS,
    SETTINGS,
    DockerStep,
    ImageMetadata,
    ParsedDockerfile,
    Setting,
    Stage,
    emulation_steps,
    heredoc_script,
    is_url,
    shell_words,
)
from agentmeter.sandbox.dockerfile_text import (
    LogicalLine,
    heredoc_marks,
    is_json_form,
    json_list,
    split_flags,
    split_kv,
    substitute,
)
from agentmeter.sandbox.spec import LayerBuildError

#: the PATH every base image here has (Debian's, docker's default; dockerimage.py's base sets it)
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_STAGE_NAME = re.compile(r"^[a-z][a-z0-9._-]*$")
_BARE_HEREDOC = re.compile(r"^<<-?([\"']?)[A-Za-z_][A-Za-z0-9_.-]*\1$")


class StageParser:
    def __init__(self, origin: str, build_args: dict[str, str]) -> None:
        self.origin = origin
        self.build_args = build_args
        #: ARGs before the first FROM (docker's global scope: FROM lines, and ``ARG NAME`` in a stage)
        self.global_args = dict(PLATFORM_ARGS)
        self.stages: list[Stage] = []
        self.names: dict[str, Stage] = {}
        self.vars: dict[str, str] = {}
        self.notices: list[str] = []
        self.line = 0

    def where(self) -> str:
        return f"{self.origin}:{self.line}"

    def error(self, message: str) -> LayerBuildError:
        return LayerBuildError(f"{self.where()}: {message}")

    @property
    def stage(self) -> Stage:
        return self.stages[-1]

    def parse(self, lines: list[LogicalLine]) -> ParsedDockerfile:
        for ll in lines:
            self.line = ll.line
            word, _, rest = ll.text.partition(" ")
            instr, rest = word.upper(), rest.strip()
            if instr not in INSTRUCTIONS:
                raise self.error(f"unknown Dockerfile instruction {word!r} "
                                 f"(known: {', '.join(INSTRUCTIONS)})")
            if instr == "ARG":
                self.arg(ll.text, rest)
            elif instr == "FROM":
                self.from_(rest)
            elif not self.stages:
                raise self.error(f"{instr} before FROM")
            else:
                getattr(self, f"i_{instr.lower()}")(ll, rest)
                if instr in SETTINGS:
                    self.stage.settings.append(Setting(instr, ll.line, ll.text))
        if not self.stages:
            raise LayerBuildError(f"{self.origin}: no FROM instruction")
        final = self.stage
        return ParsedDockerfile(origin=self.origin, from_image=final.from_image,
                                from_line=final.from_line, steps=final.steps,
                                stages=self.stages[:-1], metadata=final.metadata, final=final,
                                notices=self.notices)

    def add_step(self, kind: str, text: str, args: tuple[str, ...], **kw: object) -> None:
        self.stage.steps.append(DockerStep(kind, self.line, text, args, **kw))  # type: ignore[arg-type]

    # -- FROM and ARG ---------------------------------------------------------------------

    def arg(self, text: str, rest: str) -> None:
        pairs = [(w.partition("=")[0], w.partition("=")[2] if "=" in w else None)
                 for w in shell_words(rest, self.where())]
        if not pairs or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) for k, _ in pairs):
            raise self.error("ARG needs NAME or NAME=default")
        if not self.stages:
            for k, v in pairs:
                self.global_args[k] = self.build_args.get(k, substitute(v or "", self.global_args))
            return
        flat: list[str] = []
        for k, v in pairs:
            default = self.global_args.get(k, "") if v is None else substitute(v, self.vars)
            self.vars[k] = self.build_args.get(k, default)
            flat += [k, self.vars[k]]
        self.add_step("ARG", text, tuple(flat))  # build-time variables of later RUN steps

    def from_(self, rest: str) -> None:
        flags, rest = split_flags(substitute(rest, self.global_args))
        plat = None
        for flag, value in flags:
            if flag != "--platform":
                raise self.error(f"FROM flag {flag} is not supported (only --platform)")
            plat = value
        words = rest.split()
        if len(words) == 3 and words[1].upper() == "AS":
            name: str | None = words[2].lower()
        elif len(words) == 1:
            name = None
        else:
            raise self.error("FROM needs an image name, optionally followed by AS <name>")
        if name is not None:
            if not _STAGE_NAME.match(name):
                raise self.error(f"stage name {name!r} is not valid (letters, digits, '.', '_', '-')")
            if name in self.names:
                raise self.error(f"stage name {name!r} is already used by the stage at line "
                                 f"{self.names[name].from_line}")
        image = words[0]
        parent = self.names.get(image.lower())
        index = len(self.stages)
        if parent is not None:
            stage = Stage(index, name, parent.from_image, self.line, plat or parent.platform,
                          base_stage=parent.index, metadata=parent.metadata.copy(),
                          env=dict(parent.env), shell=parent.shell)
        else:
            stage = Stage(index, name, image, self.line, plat)
            if plat and plat != HOST_PLATFORM:
                self.notices.append(f"{self.where()}: FROM --platform={plat} {image}: built for "
                                    f"this host's {HOST_PLATFORM}")
        self.stages.append(stage)
        if name is not None:
            self.names[name] = stage
        # a fresh stage sees its base image's ENV: PATH (what ``$PATH`` expands to in
        # ``ENV PATH=/x:$PATH``, as docker expands it from the image's config)
        self.vars = {"PATH": IMAGE_PATH, **stage.env}
        if parent is None:
            stage.steps += emulation_steps(image, self.line)

    # -- steps ----------------------------------------------------------------------------

    def i_run(self, ll: LogicalLine, rest: str) -> None:
        flags, rest = split_flags(rest)
        offline = False
        mkdirs: list[str] = []
        for name, value in flags:
            if name == "--network":
                if value not in ("none", "default", "host"):
                    raise self.error(f"RUN --network={value}: use none, default or host")
                offline = value == "none"
            elif name == "--mount":
                mkdirs += self.mount(value)
            elif name != "--security" or value != "sandbox":
                raise self.error(f"RUN flag {name}{'=' + value if value else ''} is not supported")
        kw: dict[str, object] = {"offline": offline, "mkdirs": tuple(mkdirs)}
        if is_json_form(rest):
            argv = json_list(rest, "RUN", self.where())
            self.add_step("RUN", ll.text, tuple(argv), exec_form=True, **kw)
            return
        if not rest:
            raise self.error("RUN needs a command")
        kw["shell"] = self.stage.shell if self.stage.shell != DEFAULT_SHELL else ()
        text = ll.text + "".join(f"\n{d.body}{d.word}" for d in ll.heredocs)
        if ll.heredocs and _BARE_HEREDOC.match(rest):
            body = ll.heredocs[0].body
            if body.startswith("#!"):  # a script with its own interpreter: run as a file
                runner = 'f=$(mktemp) && printf %s "$1" > "$f" && chmod +x "$f" && "$f"; ' \
                         's=$?; rm -f "$f"; exit $s'
                self.add_step("RUN", text, ("/bin/sh", "-c", runner, "sh", body), exec_form=True,
                              **kw)
            else:
                self.add_step("RUN", text, (body,), **kw)
        else:
            command = heredoc_script(rest, ll.heredocs) if ll.heredocs else rest
            self.add_step("RUN", text, (command,), **kw)

    def mount(self, spec: str) -> list[str]:
        opts = dict((p.partition("=")[0], p.partition("=")[2]) for p in spec.split(","))
        kind = opts.get("type", "bind")
        target = opts.get("target") or opts.get("dst") or opts.get("destination")
        if kind in ("cache", "tmpfs") and target:
            return [target]
        raise self.error(f"RUN --mount={spec}: only type=cache and type=tmpfs mounts are supported "
                         "(as plain directories); copy what a bind mount gives with COPY")

    def i_copy(self, ll: LogicalLine, rest: str, add: bool = False) -> None:
        instr = "ADD" if add else "COPY"
        flags, rest = split_flags(rest)
        chown = chmod = None
        kw: dict[str, object] = {"add": add}
        for name, value in flags:
            value = substitute(value, self.vars)
            if name == "--chown":
                chown = value
            elif name == "--chmod":
                if not re.fullmatch(r"[0-7]{3,4}|[ugoa]*[-+=][rwxXst]*(,[ugoa]*[-+=][rwxXst]*)*", value):
                    raise self.error(f"{instr} --chmod={value}: not a file mode")
                chmod = value
            elif name == "--from" and not add:
                kw.update(self.copy_source(value))
            elif name in ("--link", "--checksum", "--keep-git-dir", "--parents"):
                continue
            else:
                raise self.error(f"{instr} flag {name} is not supported")
        words = json_list(rest, instr, self.where()) if is_json_form(rest) else \
            shell_words(rest, self.where())
        marks = {w for w, _, _ in heredoc_marks(rest)}
        inline = tuple((d.word, d.body if d.quoted else substitute(d.body, self.vars))
                       for d in ll.heredocs if d.word in marks)
        words = [w for w in words if not (w.startswith("<<") and w.lstrip("<-\"'").rstrip("\"'")
                                          in marks)]
        if not words or len(words) + len(inline) < 2:
            raise self.error(f"{instr} needs a source and a destination")
        words = [substitute(w, self.vars) for w in words]
        if not add and "from_stage" not in kw and "from_image" not in kw and \
                any(is_url(w) for w in words[:-1]):
            raise self.error(f"COPY from a URL ({next(w for w in words if is_url(w))}) is not "
                             "possible: use ADD, or download it in a RUN step")
        text = ll.text + "".join(f"\n{d.body}{d.word}" for d in ll.heredocs)
        self.add_step("COPY", text, tuple(words), chown=chown, chmod=chmod, inline=inline, **kw)

    def i_add(self, ll: LogicalLine, rest: str) -> None:
        self.i_copy(ll, rest, add=True)

    def copy_source(self, value: str) -> dict[str, object]:
        if value.isdigit():
            if int(value) >= self.stage.index:
                raise self.error(f"COPY --from={value}: stage {value} is not an earlier stage")
            return {"from_stage": int(value)}
        stage = self.names.get(value.lower())
        if stage is not None:
            if stage is self.stage:
                raise self.error(f"COPY --from={value}: a stage cannot copy from itself")
            return {"from_stage": stage.index}
        if not re.search(r"[:/@]", value):
            known = ", ".join(n for n in self.names) or "none"
            raise self.error(f"COPY --from={value}: no earlier stage is named {value!r} (stages: "
                             f"{known}); to copy from an image, give its tag ({value}:latest)")
        return {"from_image": value}

    def i_env(self, ll: LogicalLine, rest: str) -> None:
        flat: list[str] = []
        for k, v in split_kv(rest, "ENV", self.where()):
            v = substitute(v, self.vars)
            self.vars[k] = self.stage.env[k] = v
            flat += [k, v]
        self.add_step("ENV", ll.text, tuple(flat))

    def i_workdir(self, ll: LogicalLine, rest: str) -> None:
        self.value_step("WORKDIR", ll, rest)

    def i_user(self, ll: LogicalLine, rest: str) -> None:
        self.value_step("USER", ll, rest)

    def value_step(self, kind: str, ll: LogicalLine, rest: str) -> None:
        if not rest:
            raise self.error(f"{kind} needs a value")
        self.add_step(kind, ll.text, (substitute(rest, self.vars),))

    # -- recorded only (ImageMetadata) -----------------------------------------------------

    @property
    def meta(self) -> ImageMetadata:
        return self.stage.metadata

    def command(self, instr: str, rest: str) -> list[str]:
        if is_json_form(rest):
            return json_list(rest, instr, self.where())
        if not rest:
            raise self.error(f"{instr} needs a command")
        return [*self.stage.shell, rest]

    def i_shell(self, ll: LogicalLine, rest: str) -> None:
        if not is_json_form(rest):
            raise self.error('SHELL needs the JSON form, e.g. SHELL ["/bin/bash", "-c"]')
        shell = json_list(rest, "SHELL", self.where())
        if not shell:
            raise self.error("SHELL needs at least one word")
        self.stage.shell = tuple(shell)
        self.meta.shell = shell

    def i_cmd(self, ll: LogicalLine, rest: str) -> None:
        self.meta.cmd = self.command("CMD", rest)

    def i_entrypoint(self, ll: LogicalLine, rest: str) -> None:
        self.meta.entrypoint = self.command("ENTRYPOINT", rest)

    def i_label(self, ll: LogicalLine, rest: str) -> None:
        for k, v in split_kv(rest, "LABEL", self.where()):
            self.meta.labels[substitute(k, self.vars)] = substitute(v, self.vars)

    def i_maintainer(self, ll: LogicalLine, rest: str) -> None:
        self.meta.labels["maintainer"] = rest

    def i_expose(self, ll: LogicalLine, rest: str) -> None:
        for port in substitute(rest, self.vars).split():
            if not re.fullmatch(r"\d+(-\d+)?(/(tcp|udp|sctp))?", port, re.IGNORECASE):
                raise self.error(f"EXPOSE {port}: not a port (80, 8080/tcp, 5000-5010/udp)")
            self.meta.exposed.append(port)

    def i_volume(self, ll: LogicalLine, rest: str) -> None:
        rest = substitute(rest, self.vars)
        paths = json_list(rest, "VOLUME", self.where()) if is_json_form(rest) else rest.split()
        if not paths:
            raise self.error("VOLUME needs a path")
        self.meta.volumes += paths

    def i_healthcheck(self, ll: LogicalLine, rest: str) -> None:
        flags, cmd = split_flags(rest)
        word, _, tail = cmd.partition(" ")
        if word.upper() == "CMD":
            self.command("HEALTHCHECK CMD", tail.strip())
        elif word.upper() != "NONE" or flags:
            raise self.error("HEALTHCHECK needs [options] CMD <command>, or NONE")
        self.meta.healthcheck = rest

    def i_stopsignal(self, ll: LogicalLine, rest: str) -> None:
        if not rest:
            raise self.error("STOPSIGNAL needs a signal")
        self.meta.stopsignal = substitute(rest, self.vars)

    def i_onbuild(self, ll: LogicalLine, rest: str) -> None:
        word = rest.split(" ", 1)[0].upper()
        if word not in INSTRUCTIONS or word in ("ONBUILD", "FROM", "MAINTAINER"):
            raise self.error(f"ONBUILD {word or '(nothing)'}: not an instruction ONBUILD can hold")
        self.meta.onbuild.append(rest)
