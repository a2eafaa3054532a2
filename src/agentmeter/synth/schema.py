"""``schema.json``: a hand-written (or ``--help``-derived) description of a task's oracle CLI,
from which ``generate.py`` draws the frozen test cases (spec §3.3 mode 2).

A schema names the command, shared fixtures and the command classes. A **class** is one
command/subcommand path with one combination of options (the paper's unrolled class); its
``name`` is the template text the reports show (``tree <dir> -L <n>``), its ``command`` the shell
template the cases are rendered from, with one ``{param}`` placeholder per parameter.

Rendering a parameter (``generate.py``):

- ``str`` / ``path`` / ``choice``: a value drawn from ``values``; ``int`` / ``float``: from
  ``values`` when given, else uniformly from ``[min, max]`` (floats with ``digits`` decimals);
  ``bool``: present (its ``flag``) or absent, drawn 50/50 unless required (then always present).
- A value is shell-quoted unless ``raw`` (for values that are shell text themselves).
- With ``flag`` set the placeholder becomes ``flag value`` (``flag=value`` when ``flag`` ends
  with ``=``); a bool renders only its flag.
- An optional parameter (``required: false``) is included with probability ``p_present``; when
  left out, the whitespace-separated template *token* holding its placeholder is dropped
  (``--depth={n}`` disappears whole).

Negative cases (one per class by default, like the released adapters): either one of a
parameter's ``invalid`` values, rendered in its place, or a required parameter left out
(``missing_is_error``, default = ``required``). A class with neither has no negative case.

Fixtures: ``files`` (relative path -> text, written under ``/test_data`` before each case) and a
``prep_script`` (shell, run after the files are written). The schema's ``fixtures`` are shared by
every class; a class's own ``fixtures`` *replace* them (no merging).

Example::

    {
      "version": 1,
      "command": "tree",
      "overview": "List the contents of directories in a tree-like format.",
      "scrub": {"Steve Baker": "the author"},
      "fixtures": {"files": {"d/a.txt": "a\\n", "d/sub/b.txt": "b\\n"},
                   "prep_script": "mkdir -p /test_data/d/empty"},
      "classes": [
        {"name": "tree <dir> -L <n>",
         "command": "tree {dir} {n}",
         "params": [
           {"name": "dir", "type": "path", "values": ["d", "d/sub"], "invalid": ["nope/"]},
           {"name": "n", "type": "int", "flag": "-L", "min": 1, "max": 3,
            "invalid": ["0", "x"]}]},
        {"name": "tree -a <dir>",
         "command": "tree -a {dir}",
         "params": [{"name": "dir", "type": "path", "values": ["d"]}]}
      ]
    }
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

ParamType = Literal["str", "int", "float", "bool", "path", "choice"]

#: a placeholder in a class's command template
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class SchemaError(ValueError):
    """A malformed schema: names the file and the field."""


class Fixtures(BaseModel):
    """Files written under /test_data before each case, then the prep script."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    files: dict[str, str] = Field(default_factory=dict,
                                  description="relative path under /test_data -> text content")
    prep_script: str = Field(default="", description="shell run after the files are written")

    @model_validator(mode="after")
    def _relative(self) -> Fixtures:
        for rel in self.files:
            parts = rel.split("/")
            if not rel or rel.startswith("/") or ".." in parts or "" in parts:
                raise ValueError(f"fixture path {rel!r} must be relative, without '..' or '//'")
        return self


class Param(BaseModel):
    """One parameter (positional or option) of a class."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                      description="the placeholder name in the command template")
    type: ParamType = "str"
    flag: str | None = Field(default=None, description="option text put before the value "
                             "(-L, --depth, --depth=); required for bool")
    values: list[str] = Field(default_factory=list,
                              description="the value pool (the choices for choice)")
    min: float | None = None
    max: float | None = None
    digits: int = Field(default=2, ge=0, le=10, description="decimals of drawn floats")
    required: bool = True
    p_present: float = Field(default=0.5, ge=0, le=1,
                             description="probability an optional parameter is included")
    raw: bool = Field(default=False, description="insert values unquoted (shell text)")
    invalid: list[str] = Field(default_factory=list,
                               description="values the oracle must reject (negative cases)")
    missing_is_error: bool | None = Field(
        default=None, description="leaving it out is a negative case; default = required")

    @model_validator(mode="after")
    def _pool(self) -> Param:
        if self.type == "bool":
            if not self.flag:
                raise ValueError(f"param {self.name!r}: a bool needs its flag")
            if self.values:
                raise ValueError(f"param {self.name!r}: a bool takes no values")
        elif self.type in ("int", "float"):
            if not self.values and (self.min is None or self.max is None):
                raise ValueError(f"param {self.name!r}: {self.type} needs values or min and max")
            if self.min is not None and self.max is not None and self.min > self.max:
                raise ValueError(f"param {self.name!r}: min > max")
        elif not self.values:
            raise ValueError(f"param {self.name!r}: {self.type} needs a non-empty values pool")
        if self.missing_is_error is None:
            object.__setattr__(self, "missing_is_error", self.required)
        return self


class CommandClass(BaseModel):
    """A command class: a subcommand path with one combination of parameters."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, description="the class's template text, its identity")
    command: str = Field(min_length=1, description="shell template with {param} placeholders")
    params: list[Param] = Field(default_factory=list)
    fixtures: Fixtures | None = Field(default=None, description="replaces the shared fixtures")
    stdin: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    negative: bool = Field(default=True, description="generate one negative case")
    description: str = Field(default="", description="what the class does (for the prompt)")

    @model_validator(mode="after")
    def _placeholders(self) -> CommandClass:
        used = PLACEHOLDER.findall(self.command)
        names = [p.name for p in self.params]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"class {self.name!r}: duplicate params {sorted(dup)}")
        twice = {n for n in used if used.count(n) > 1}
        if twice:
            raise ValueError(f"class {self.name!r}: placeholders used twice {sorted(twice)}")
        if set(used) != set(names):
            raise ValueError(f"class {self.name!r}: placeholders {sorted(set(used))} do not "
                             f"match params {sorted(names)}")
        return self

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)


class Schema(BaseModel):
    """The whole ``schema.json``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    command: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._+-]+$",
                         description="the oracle's command name (what the cases invoke)")
    overview: str = Field(default="", description="what the tool does (prompt overview)")
    scrub: dict[str, str] = Field(default_factory=dict, description="identifying text -> its "
                                  "replacement in the prompt (authors, brands, names)")
    fixtures: Fixtures = Field(default_factory=Fixtures)
    env: dict[str, str] = Field(default_factory=dict, description="environment of every case")
    classes: list[CommandClass] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Schema:
        names = [c.name for c in self.classes]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate class names {dup}")
        return self

    def fixtures_of(self, cls: CommandClass) -> Fixtures:
        return cls.fixtures if cls.fixtures is not None else self.fixtures


def load_schema(path: Path) -> Schema:
    """Read and validate ``schema.json``; one-line :class:`SchemaError` naming file and field."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise SchemaError(f"{path}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise SchemaError(f"{path}:{e.lineno}: not JSON: {e.msg}") from None
    return parse_schema(data, str(path))


def parse_schema(data: object, origin: str = "schema") -> Schema:
    try:
        return Schema.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise SchemaError(f"{origin}: {field}: {msg}") from None


def dump_schema(schema: Schema) -> str:
    """Canonical JSON text (exclude nothing: a dumped schema reloads to the same model)."""
    return json.dumps(schema.model_dump(mode="json", exclude_defaults=True), indent=2,
                      ensure_ascii=False) + "\n"
