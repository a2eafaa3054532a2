"""Draft a :mod:`schema` from a CLI's ``--help`` output, walked recursively (spec §3.1 step 1,
without the model: the deterministic half of the paper's iterative schema extraction).

``walk(run, argv)`` runs ``argv --help`` (``-h`` when that fails) through ``run`` (any function
returning ``(exit code, stdout+stderr)``, e.g. a command in the task's sandbox), parses the page,
and recurses into each listed subcommand (``argv sub --help``). One parser covers the common
styles by their shared shape:

- the usage line(s) (``usage: …``, ``Usage: …``, cobra's ``Usage:`` block, ``Usage of prog:``)
  give the positionals: bare words are required, ``[words]`` optional, ``{a,b}``/``COMMAND``
  mark subcommands;
- option lines anywhere (argparse ``options:``, click ``Options:``, cobra ``Flags:``, Go's
  ``flag`` package, GNU-style lists): a line indented ≤ 8 columns starting ``-x``/``--xx``, the
  option spec separated from its help by a tab or two spaces; the metavar after the name (or
  ``=X``) gives the type: none -> bool, ``{a,b}``/``[a|b]`` -> choice, int-like -> int, …;
- subcommands from ``…Commands:`` sections (click, cobra, docker) and argparse's ``{a,b}``.

Each command page becomes classes: the command with its positionals, and the same once per
option (``--help``/``--version`` excepted); a page with subcommands contributes only its
subcommands. Value pools are generic drafts over a small fixture set: edit the schema after.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from agentmeter.synth.schema import CommandClass, Fixtures, Param, ParamType, Schema

Run = Callable[[list[str]], tuple[int, str]]

MAX_DEPTH = 3
MAX_PAGES = 200
SKIP_SUBCOMMANDS = {"help", "completion"}
SKIP_OPTIONS = {"-h", "--help", "-help", "--version", "-version"}

DRAFT_FILES = {"input.txt": "alpha\nbeta\ngamma\n", "data/notes.md": "# Notes\n\n- one\n- two\n",
               "data/values.csv": "name,value\na,1\nb,2\n"}
_POOLS: dict[str, list[str]] = {
    "path": ["input.txt", "data/notes.md", "data"], "out": ["out.txt", "data/result.txt"],
    "str": ["alpha", "hello world", "x-1"], "int": [], "float": []}

_USAGE = re.compile(r"^\s*usage(?: of [^:]*)?:\s*(.*)$", re.IGNORECASE)
_OPTION_LINE = re.compile(r"^[ \t]{0,8}(-{1,2}[A-Za-z0-9?][^\t]*?)(?:\t+|\s{2,}|$)(.*)$")
_COMMANDS = re.compile(r"^\s*[A-Za-z ]*commands:\s*$", re.IGNORECASE)
_COMMAND_LINE = re.compile(r"^\s{1,8}([A-Za-z0-9][\w.:-]*)\*?(?:,\s*[\w.-]+)*(?:\s{2,}|\t|$)")
_INT = {"int", "integer", "n", "num", "number", "count", "level", "depth", "#", "uint", "int64",
        "int32", "uint64", "lines", "size", "limit", "max", "min", "width", "port"}
_FLOAT = {"float", "float32", "float64", "double", "ratio", "threshold"}
_PATHISH = ("file", "path", "dir", "folder", "src", "dst", "dest", "input", "output", "infile",
            "outfile", "directory", "filename")
_GENERIC = {"options", "option", "flags", "command", "commands", "args", "arguments", "--", "...",
            "subcommand", "cmd"}


class HelpError(ValueError):
    """Help text that cannot be read: names the command."""


@dataclass
class Option:
    names: list[str]
    metavar: str | None
    help: str = ""
    #: named outside brackets in the usage line (argparse's ``usage: prog [-c C] -t TEXT``)
    in_usage: bool = False

    @property
    def required(self) -> bool:
        """click's ``[required]``, cobra's ``(required)``, or bare in the usage line"""
        return self.in_usage or re.search(r"[\[(]required[\])]", self.help,
                                          re.IGNORECASE) is not None

    @property
    def name(self) -> str:
        longs = [n for n in self.names if n.startswith("--")]
        return (longs or self.names)[0]


@dataclass
class Positional:
    name: str
    required: bool
    choices: list[str] = field(default_factory=list)


@dataclass
class HelpPage:
    usage: str
    positionals: list[Positional]
    options: list[Option]
    subcommands: list[str]


@dataclass
class Walked:
    schema: Schema
    #: the help text of every page walked: "tool sub" -> text
    help: dict[str, str]


def _usage(lines: list[str], prog: str) -> str:
    for i, line in enumerate(lines):
        m = _USAGE.match(line)
        if not m:
            continue
        parts = [m.group(1).strip()] if m.group(1).strip() else []
        for cont in lines[i + 1:]:
            text = cont.strip()
            if not text or not cont[:1].isspace() or text.startswith("-"):
                break
            if parts and text.split()[0] == prog:  # a second usage alternative (cobra)
                break
            parts.append(text)
        return " ".join(parts)
    return ""


def _top_tokens(text: str) -> list[str]:
    """``text`` split on spaces outside ``[]``, ``{}``, ``<>``, ``()``."""
    out, cur, depth = [], "", 0
    for ch in text:
        depth += (ch in "[{<(") - (ch in "]}>)")
        if ch.isspace() and depth <= 0:
            if cur:
                out.append(cur)
            cur, depth = "", 0
        else:
            cur += ch
    return [*out, cur] if cur else out


def _positionals(usage: str, prog: str, metavars: set[str]) -> tuple[list[Positional], bool]:
    """Positionals of a usage text, and whether it names subcommands."""
    tokens = _top_tokens(usage)
    if prog in tokens:
        tokens = tokens[len(tokens) - tokens[::-1].index(prog):]
    elif tokens:
        tokens = tokens[1:]
    out: list[Positional] = []
    subcommands, after_option = False, False
    for tok in tokens:
        optional = tok.startswith("[")
        inner = tok.strip("[]").removesuffix("...").strip().strip("[]").strip()
        if tok.startswith("-"):
            after_option = True
            continue
        if after_option and (inner in metavars or inner.isupper()) and not optional:
            after_option = False
            continue
        after_option = False
        if inner.startswith("{"):
            subcommands = True
            continue
        name = inner.split()[0].strip("<>").removesuffix("...") if inner else ""
        if not name or name.startswith("-") or "|" in name:
            continue
        if name.lower() in _GENERIC:
            subcommands = subcommands or name.lower() in {"command", "subcommand", "cmd"}
            continue
        if out and out[-1].name == name:  # "items [items ...]": one positional, repeated
            continue
        out.append(Positional(name=name, required=not optional))
    return out, subcommands


def _option(spec: str, help_text: str) -> Option:
    names: list[str] = []
    metavar: str | None = None
    for alt in re.split(r",\s*(?=-)|\s+/\s+", spec.strip()):
        alt = alt.strip()
        if not alt.startswith("-"):
            metavar = metavar or alt
            continue
        m = re.match(r"^(-{1,2}[A-Za-z0-9?][\w?.-]*)(\[=\]|=|\s+)?(.*)$", alt)
        if not m:
            continue
        names.append(m.group(1))
        rest = m.group(3).strip()
        if rest and not rest.startswith("[="):  # "--info[=FLAGS]": an optional value, a flag
            metavar = rest
    return Option(names=names, metavar=metavar, help=help_text.strip())


def parse_help(text: str, prog: str) -> HelpPage | None:
    """The parts of one help page; None when it shows no usage, option or command."""
    lines = text.replace("\r\n", "\n").split("\n")
    usage = _usage(lines, prog)
    options: list[Option] = []
    subcommands: list[str] = []
    in_commands = False
    for line in lines:
        if _COMMANDS.match(line):
            in_commands = True
            continue
        if in_commands:
            if not line.strip():
                in_commands = False
                continue
            m = _COMMAND_LINE.match(line)
            if m and m.group(1) not in subcommands:
                subcommands.append(m.group(1))
            continue
        if re.match(r"^\s*-{3,}", line) or _USAGE.match(line):
            continue
        m = _OPTION_LINE.match(line)
        if m:
            opt = _option(m.group(1), m.group(2))
            if opt.names and all(o.name != opt.name for o in options):
                options.append(opt)
    bare = {tok.split("=", 1)[0] for tok in _top_tokens(usage) if re.match(r"^-{1,2}\w", tok)}
    for opt in options:
        opt.in_usage = bool(bare & set(opt.names))
    metavars = {o.metavar for o in options if o.metavar}
    positionals, has_sub = _positionals(usage, prog, metavars)
    for tok in _top_tokens(usage):
        if tok.startswith("{") and not subcommands:
            subcommands = [c.strip() for c in tok.strip("{}").split(",") if c.strip()]
    if not subcommands and has_sub:
        positionals = [p for p in positionals if p.name.lower() not in _GENERIC]
    if not usage and not options and not subcommands:
        return None
    return HelpPage(usage=usage, positionals=positionals, options=options,
                    subcommands=[s for s in subcommands if s not in SKIP_SUBCOMMANDS])


def _type(metavar: str | None, name: str) -> tuple[ParamType, list[str]]:
    if metavar is None:
        return "bool", []
    mv = metavar.strip().strip("<>").strip()
    if mv.startswith("{") or (mv.startswith("[") and "|" in mv):
        return "choice", [c.strip() for c in re.split(r"[,|]", mv.strip("{}[]")) if c.strip()]
    low = mv.lower().split()[0] if mv.split() else ""
    if low in _INT or low.startswith("integer"):
        return "int", []
    if low in _FLOAT or low.startswith("float"):
        return "float", []
    if any(h in low for h in _PATHISH) or any(h in name.lower() for h in _PATHISH):
        return "path", []
    return "str", []


def _param(pname: str, ptype: ParamType, choices: list[str], flag: str | None,
           required: bool, hint: str) -> Param:
    base: dict[str, object] = {"name": pname, "type": ptype, "flag": flag, "required": required}
    if ptype == "int":
        base |= {"min": 1, "max": 5, "invalid": ["notanumber"]}
    elif ptype == "float":
        base |= {"min": 0, "max": 1, "invalid": ["notanumber"]}
    elif ptype == "choice":
        base |= {"values": choices, "invalid": ["not-a-choice"]}
    elif ptype == "path":
        out = "out" in hint.lower()
        base |= {"values": _POOLS["out" if out else "path"],
                 "invalid": [] if out else ["no/such/file.txt"]}
    elif ptype == "str":
        base["values"] = _POOLS["str"]
    return Param.model_validate(base)


def _ident(text: str, taken: set[str]) -> str:
    name = re.sub(r"\W+", "_", text.lstrip("-").strip("<>[]")).strip("_").lower() or "arg"
    if name[0].isdigit():
        name = "p_" + name
    out, n = name, 2
    while out in taken:
        out, n = f"{name}_{n}", n + 1
    taken.add(out)
    return out


def page_classes(words: list[str], page: HelpPage) -> list[CommandClass]:
    """The draft classes of one command page (``words``: the command as invoked)."""
    if page.subcommands:
        return []
    prefix = " ".join(words)
    taken: set[str] = set()
    pos: list[tuple[str, str, Param]] = []
    for p in page.positionals:
        pname = _ident(p.name, taken)
        ptype, choices = _type(p.name, p.name)
        shown = f"<{p.name}>" if p.required else f"[<{p.name}>]"
        param = _param(pname, ptype if ptype != "bool" else "str", choices, None, p.required,
                       p.name)
        pos.append((shown, "{" + pname + "}", param))
    for opt in page.options:  # required options belong to every class of the page
        if opt.required and not set(opt.names) & SKIP_OPTIONS:
            ptype, choices = _type(opt.metavar, opt.name)
            param = _param(_ident(opt.name, taken), ptype, choices, opt.name, True, opt.name)
            shown = opt.name if ptype == "bool" else f"{opt.name} <{opt.metavar}>"
            pos.insert(0, (shown, "{" + param.name + "}", param))
    pos_names = " ".join(s for s, _, _ in pos)
    classes = [CommandClass(name=f"{prefix} {pos_names}".strip(),
                            command=f"{prefix} {' '.join(c for _, c, _ in pos)}".strip(),
                            params=[p for _, _, p in pos])]
    for opt in page.options:
        if set(opt.names) & SKIP_OPTIONS or opt.required:
            continue
        oname = _ident(opt.name, set(taken))
        ptype, choices = _type(opt.metavar, opt.name)
        shown = opt.name if ptype == "bool" else f"{opt.name} <{opt.metavar}>"
        param = _param(oname, ptype, choices, opt.name, True, f"{opt.name} {opt.metavar or ''}")
        classes.append(CommandClass(
            name=f"{prefix} {shown} {pos_names}".strip(),
            command=f"{prefix} {{{oname}}} {' '.join(c for _, c, _ in pos)}".strip(),
            params=[param, *(p for _, _, p in pos)], description=opt.help))
    return classes


def _help(run: Run, argv: list[str]) -> str:
    last = ""
    for flag in ("--help", "-h"):
        code, text = run([*argv, flag])
        if text.strip() and (code == 0 or parse_help(text, argv[-1]) is not None):
            return text
        last = f"exited {code}: {(text.strip().splitlines() or ['(no output)'])[0][:200]}"
    raise HelpError(f"`{' '.join(argv)} --help` {last}")


def walk(run: Run, argv: list[str], command: str | None = None,
         max_depth: int = MAX_DEPTH) -> Walked:
    """Walk ``argv --help`` and its subcommands into a draft schema (``command``: the name the
    schema records, default the last word of ``argv``)."""
    pages: dict[str, str] = {}
    classes: list[CommandClass] = []
    todo: list[list[str]] = [list(argv)]
    while todo:
        words = todo.pop(0)
        text = _help(run, words)
        pages[" ".join(words)] = text
        page = parse_help(text, words[-1])
        if page is None:
            raise HelpError(f"`{' '.join(words)} --help`: no usage line, option or command "
                            "found in its output")
        classes += page_classes(words, page)
        if len(words) - len(argv) < max_depth:
            todo += [[*words, sub] for sub in page.subcommands]
        if len(pages) + len(todo) > MAX_PAGES:
            raise HelpError(f"`{' '.join(argv)}`: more than {MAX_PAGES} help pages")
    if not classes:
        raise HelpError(f"`{' '.join(argv)} --help`: no command class found")
    unique: dict[str, CommandClass] = {}
    for c in classes:
        unique.setdefault(c.name, c)
    schema = Schema(command=command or argv[-1].rsplit("/", 1)[-1], fixtures=Fixtures(files=DRAFT_FILES),
                    classes=list(unique.values()))
    return Walked(schema=schema, help=pages)


def draft_values(schema: Schema) -> list[str]:
    """The drafted values a task author should edit: each parameter whose pool is one of the
    generic drafts (paths over the draft fixtures, words, int 1–5, float 0–1), as
    ``class › param: values``. Choices read from the help page are real, and not listed."""
    generic = [v for pool in _POOLS.values() for v in pool]
    out = []
    for cls in schema.classes:
        for p in cls.params:
            if p.type in ("int", "float") and not p.values and (p.min, p.max) in ((1, 5), (0, 1)):
                shown = f"{p.type} {p.min:g}–{p.max:g}"
            elif p.type in ("str", "path") and p.values and set(p.values) <= set(generic):
                shown = ", ".join(p.values)
            else:
                continue
            out.append(f"{cls.name} › {p.name}: {shown}")
    return out
