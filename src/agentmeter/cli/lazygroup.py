"""The root command group, built lazily.

typer turns a command's function into a click command by evaluating its annotations (a few ms a
command, 25 commands); :class:`LazyGroup` does that only for the command that runs or whose help
is shown. The plain ``agentmeter --help`` lists the commands from their registrations (name,
help, hidden) without building them; the rich help and shell completion build them all, and a
mistyped name's suggestions need only the names, so each shows what the eager group would. The
group's own flags default to False (:meth:`LazyGroup.get_params`).

Help is plain text (click's formatter) unless standard output is a terminal: typer's rich help
imports ``rich.markdown``, ``rich.syntax`` and ``rich.traceback`` (≈ 0.1 s). Help texts are written
for rich markup (``\\[`` for a bracket); the plain help shows them unescaped.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, MutableMapping
from types import ModuleType
from typing import Any, ClassVar

import typer
import typer.main
from typer.core import MarkupMode, TyperCommand, TyperGroup
from typer.models import CommandInfo, TyperInfo

Command = Any  # click's Command (typer vendors click in newer versions, imports it in older)


def markup_mode(is_terminal: bool) -> MarkupMode:
    """typer's rich help on a terminal, click's plain help otherwise (pipes, logs, tests)."""
    return "rich" if is_terminal else None


def unescape(text: str | None) -> str | None:
    """Rich markup's escaped bracket as the plain text it stands for."""
    return None if text is None else text.replace("\\[", "[")


def _unescape_help(cmd: Command) -> None:
    """The plain help's texts: ``cmd``'s, its parameters' and its built subcommands'."""
    for owner in (cmd, *cmd.params):
        for attr in ("help", "short_help", "epilog"):
            if isinstance(getattr(owner, attr, None), str):
                setattr(owner, attr, unescape(getattr(owner, attr)))
    for sub in dict(getattr(cmd, "commands", None) or {}).values():
        _unescape_help(sub)


class _Entry:
    """One command or command group as registered: enough to list it, and to build it."""

    def __init__(self, name: str, info: CommandInfo | TyperInfo) -> None:
        self.name, self.info = name, info

    def outline(self, mode: MarkupMode) -> Command:
        """A click command with this entry's name, help and flags but no parameters (cheap)."""
        if isinstance(self.info, CommandInfo):
            info = self.info
            help_ = (inspect.getdoc(info.callback) if info.help is None
                     else inspect.cleandoc(info.help))
            fields: dict[str, Any] = {"help": help_, "short_help": info.short_help, "hidden": info.hidden,
                      "deprecated": info.deprecated}
        else:
            solved = typer.main.solve_typer_info_defaults(self.info)
            fields = {"help": solved.help, "short_help": solved.short_help,
                      "hidden": solved.hidden, "deprecated": solved.deprecated}
        made = TyperCommand(name=self.name, rich_markup_mode=mode, **fields)
        if mode is None:
            _unescape_help(made)
        return made

    def build(self, mode: MarkupMode) -> Command:
        """The click command typer makes of this entry (as the eager group would hold it)."""
        one = typer.Typer(add_completion=False, rich_markup_mode=mode)
        if isinstance(self.info, CommandInfo):
            one.registered_commands.append(self.info)
            made = typer.main.get_command(one)  # one command: that command itself
        else:
            one.registered_groups.append(self.info)
            made = typer.main.get_command(one).commands[self.name]  # type: ignore[attr-defined]
        if mode is None:
            _unescape_help(made)
        return made


def entries(modules: tuple[ModuleType, ...]) -> dict[str, _Entry]:
    """The commands of ``modules`` (each has ``register(app)``): the commands in registration
    order, then the command groups (typer's order when all are registered on one app)."""
    out: dict[str, _Entry] = {}
    groups: dict[str, _Entry] = {}
    for module in modules:
        app = typer.Typer(add_completion=False)
        register: Callable[[typer.Typer], None] = module.register
        register(app)
        for command in app.registered_commands:
            assert command.callback is not None
            name = command.name or typer.main.get_command_name(command.callback.__name__)
            out[name] = _Entry(name, command)
        for group in app.registered_groups:
            group_name = typer.main.solve_typer_info_defaults(group).name
            assert isinstance(group_name, str) and group_name, "a command group needs a name"
            groups[group_name] = _Entry(group_name, group)
    return out | groups


class _Commands(MutableMapping[str, Command]):
    """The group's commands by name: each built on first access."""

    def __init__(self, entries: dict[str, _Entry], mode: MarkupMode) -> None:
        self.entries, self.mode = entries, mode
        self.built: dict[str, Command] = {}

    def __getitem__(self, name: str) -> Command:
        if name not in self.built:
            self.built[name] = self.entries[name].build(self.mode)  # KeyError: no such command
        return self.built[name]

    def __setitem__(self, name: str, cmd: Command) -> None:
        self.built[name] = cmd
        self.entries.setdefault(name, _Entry(name, CommandInfo(name=name)))

    def __delitem__(self, name: str) -> None:
        del self.entries[name]
        self.built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


class LazyGroup(TyperGroup):
    """A typer group whose commands come from ``modules`` (set by a subclass), built on use."""

    modules: ClassVar[tuple[ModuleType, ...]] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = _Commands(entries(self.modules), self.rich_markup_mode)

    def get_params(self, ctx: Any) -> list[Any]:
        """The group's options; a flag without a default (``--help``, the completion flags) has
        False: typer converts a value that is not a bool through a pydantic TypeAdapter, and
        importing pydantic for the group's unused flags costs ``agentmeter CMD --help`` ≈ 0.1 s."""
        params: list[Any] = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False) and param.default is None:
                param.default = False
        return params

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The plain help's command list, from the registrations (nothing built)."""
        assert isinstance(self.commands, _Commands)
        rows = [(name, entry.outline(self.rich_markup_mode))
                for name, entry in self.commands.entries.items()]
        rows = [(name, cmd) for name, cmd in rows if not cmd.hidden]
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in rows])
