"""Seeded, reproducible case generation from a :mod:`schema` (spec §3.3 mode 2).

Per class: one negative case (an ``invalid`` value or a required parameter left out, see
schema.py) and ``per_class - 1`` positive draws from the value pools; cases whose command (and
stdin) repeat an earlier case of the class are removed and counted, as the released adapters'
small choice lists make many draws identical. Every class draws from its own
``random.Random(f"{seed}/{class name}")``, so one class's cases do not depend on the others and the
same seed gives byte-identical ``cases.jsonl``.
"""

from __future__ import annotations

import random
import re
import shlex
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from agentmeter.synth.schema import PLACEHOLDER, CommandClass, Param, Schema
from agentmeter.verify.difftest.config import Case

#: the paper's number of cases per command class (CASES_PER_CATEGORY in every released start.py)
DEFAULT_PER_CLASS = 50

#: a whitespace-separated template token holding one or more placeholders (with the one space
#: before it, dropped together when a parameter is left out)
_TOKEN = re.compile(r"[ \t]?\S*\{[A-Za-z_][A-Za-z0-9_]*\}\S*")

_MISSING = object()


class ClassCounts(BaseModel):
    """What generation produced for one class (recorded in tests/synth.json)."""

    model_config = ConfigDict(extra="forbid")

    positive: int = 0
    negative: int = 0
    duplicates: int = 0


@dataclass
class Generated:
    cases: list[Case]
    counts: dict[str, ClassCounts] = field(default_factory=dict)

    @property
    def duplicates(self) -> int:
        return sum(c.duplicates for c in self.counts.values())


def _fmt(p: Param, value: str) -> str:
    text = value if p.raw else shlex.quote(value)
    if p.flag is None:
        return text
    return p.flag + text if p.flag.endswith("=") else f"{p.flag} {text}"


def _draw(p: Param, rng: random.Random) -> str | None:
    """A rendered positive value of ``p``, or None when it is left out."""
    if p.type == "bool":
        return p.flag if p.required or rng.random() < p.p_present else None
    if not p.required and rng.random() >= p.p_present:
        return None
    if p.values:
        return _fmt(p, rng.choice(p.values))
    assert p.min is not None and p.max is not None  # the schema guarantees a pool or a range
    if p.type == "int":
        return _fmt(p, str(rng.randint(int(p.min), int(p.max))))
    return _fmt(p, f"{rng.uniform(p.min, p.max):.{p.digits}f}")


def render(template: str, values: dict[str, str | None]) -> str:
    """``template`` with each placeholder replaced; a token whose parameter is None is dropped."""

    def token(m: re.Match[str]) -> str:
        text = m.group(0)
        names = PLACEHOLDER.findall(text)
        if any(values[n] is None for n in names):
            return ""
        return PLACEHOLDER.sub(lambda n: str(values[n.group(1)]), text)

    return _TOKEN.sub(token, template).strip()


def _negative(cls: CommandClass, rng: random.Random) -> str | None:
    """A negative command of ``cls``, or None when its schema declares no way to fail."""
    choices: list[tuple[Param, object]] = []
    for p in cls.params:
        choices += [(p, v) for v in p.invalid]
        if p.missing_is_error:
            choices.append((p, _MISSING))
    if not choices:
        return None
    bad, how = rng.choice(choices)
    values: dict[str, str | None] = {}
    for p in cls.params:
        if p is bad:
            values[p.name] = None if how is _MISSING else _fmt(p, str(how))
        else:
            # the other parameters present with a valid value, so only one thing is wrong
            values[p.name] = p.flag if p.type == "bool" else _fmt(p, _first(p))
    return render(cls.command, values)


def _first(p: Param) -> str:
    if p.values:
        return p.values[0]
    assert p.min is not None
    return str(int(p.min)) if p.type == "int" else f"{p.min:.{p.digits}f}"


def generate(schema: Schema, seed: int, per_class: int = DEFAULT_PER_CLASS) -> Generated:
    """The cases of every class of ``schema`` (ids ``c0001``…, in class order)."""
    if per_class < 1:
        raise ValueError(f"per_class must be >= 1, not {per_class}")
    out = Generated(cases=[])
    for cls in schema.classes:
        rng = random.Random(f"{seed}/{cls.name}")
        counts = out.counts[cls.name] = ClassCounts()
        fixtures = schema.fixtures_of(cls)
        drawn: list[tuple[str, bool]] = []
        neg = _negative(cls, rng) if cls.negative and per_class > 1 else None
        if neg is not None:
            drawn.append((neg, True))
        while len(drawn) < per_class:
            drawn.append((render(cls.command, {p.name: _draw(p, rng) for p in cls.params}), False))
        seen: set[str] = set()
        for command, negative in drawn:
            if command in seen:
                counts.duplicates += 1
                continue
            seen.add(command)
            if negative:
                counts.negative += 1
            else:
                counts.positive += 1
            out.cases.append(Case.model_validate({
                "id": f"c{len(out.cases) + 1:04d}", "class": cls.name, "command": command,
                "prep_script": fixtures.prep_script, "files": dict(fixtures.files),
                "env": {**schema.env, **cls.env}, "expect_error": negative,
                "stdin": cls.stdin}))
    return out
