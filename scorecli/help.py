"""`--help` that fits a terminal: options grouped in panels by topic, full flag names (never cut),
no type column, examples after the options (docs/cli.md: Flags of `scorecli score`).

typer's own rich help puts six columns side by side (flag, short flag, negative flag, type, range,
help) and cuts long flag names at 80 columns. Here each option is one row of two columns: the flag
as it is typed (`-o, --out PATH`, `--self-check / --no-self-check`) and its help, which wraps.
Commands use `Command`, the app `Group` (`typer.Typer(cls=...)`, `app.command(cls=...)`); an
option's panel is its `rich_help_panel`. Knows nothing about what the options do.
"""

from __future__ import annotations

from typing import Any

import typer
from rich import box
from rich.console import Console
from rich.console import Group as Lines
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

from scorecli.argv import check_glued

WIDEST = 110  # wider help lines are hard to read, however wide the terminal
OTHER = "Other"
# panels in this order (others after them, as their first option comes)
ORDER = ("Input", "Model", "Self-check", "Benchmark", "Scoring", "Output", "Performance", "Long runs", OTHER)


def _console() -> Console:
    width = Console().width  # the terminal's, else $COLUMNS, else 80
    return Console(width=min(width, WIDEST), highlight=False, markup=False, emoji=False, soft_wrap=False)


def flag_cell(param: Any) -> str:
    """How the option is typed: `-o, --out PATH`, `--pooled-hidden-states`, `--[no-]self-check`."""
    if param.param_type_name == "argument":
        return (param.metavar or param.name.upper()) + ("..." if param.nargs != 1 else "")
    longs = [o for o in param.opts if o.startswith("--")]
    shorts = [o for o in param.opts if not o.startswith("--")]
    names = ", ".join(shorts + longs)
    if param.secondary_opts:
        names += " / " + ", ".join(param.secondary_opts)
    if not param.is_flag:
        names += " " + (param.metavar or param.name.upper())
    return names


def help_cell(param: Any) -> Text:
    """The option's help, then what a user needs beside it: required, its default, its env var."""
    notes = []
    if param.required:
        notes.append("required")
    default = param.default
    shown = default is not None and default is not False and default != ""  # 0 is a default to show (0 == False)
    if param.param_type_name == "option" and param.show_default is not False and shown:
        if param.is_flag and param.secondary_opts:
            notes.append("default: " + (param.opts[0] if default else param.secondary_opts[0]))
        elif not param.is_flag:
            notes.append(f"default: {default}")
    if param.envvar and getattr(param, "show_envvar", False):
        notes.append(f"env: {param.envvar}")
    text = Text(param.help or "")
    if notes:
        text.append(f" [{'; '.join(notes)}]", style="dim")
    return text


def panel_of(param: Any) -> str:
    return getattr(param, "rich_help_panel", None) or (OTHER if param.param_type_name == "option" else "Input")


def panel_names(params: list[Any]) -> list[str]:
    """The panels of `params`: those of `ORDER` in its order, then others as they first come."""
    names: list[str] = []
    for name in map(panel_of, params):
        if name not in names:
            names.append(name)
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), names.index(n)))


def options_table(params: list[Any], flag_width: int) -> Table:
    table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False, expand=True)
    table.add_column(no_wrap=True, min_width=flag_width, max_width=flag_width, style="bold cyan")
    table.add_column(ratio=1, overflow="fold")
    for p in params:
        table.add_row(flag_cell(p), help_cell(p))
    return table


def paragraphs(text: str | None) -> Text:
    """A docstring as help: its paragraphs, each joined into one line for the console to wrap."""
    parts = [" ".join(p.split()) for p in (text or "").strip().split("\n\n")]
    return Text("\n\n".join(p for p in parts if p))


def _usage(command: Any, ctx: Any) -> Text:
    """`Usage: scorecli score [OPTIONS] INPUT... --out OUT`: the arguments and required options
    as they are typed (a group: its own pieces, `COMMAND [ARGS]...`)."""
    if isinstance(command, TyperGroup):
        pieces = command.collect_usage_pieces(ctx)
    else:
        params = command.get_params(ctx)
        args = [flag_cell(p) if p.required else f"[{flag_cell(p)}]" for p in params if p.param_type_name == "argument"]
        needed = [flag_cell(p).split(", ")[-1] for p in params if p.param_type_name == "option" and p.required]
        pieces = ["[OPTIONS]", *args, *needed]
    return Text.assemble(("Usage: ", "bold"), " ".join([ctx.command_path, *pieces]))


def _print(parts: list[Any], console: Console) -> None:
    """Render, then print without the spaces rich pads each line with (they would be copied too)."""
    with console.capture() as captured:
        console.print(Lines(*parts))
    print("\n".join(line.rstrip() for line in captured.get().rstrip().split("\n")))


def _epilog(text: str | None) -> list[Any]:
    """Examples, as plain indented lines that copy as they are (no box around them)."""
    if not text:
        return []
    return [Padding(Text(text.strip("\n")), (0, 1, 1, 1))]


class Command(TyperCommand):
    """A command whose `--help` is `help.py`'s layout, and whose words are checked for a short
    option glued to a long option's name before they are parsed (`argv`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        check_glued(self.params, args)
        return super().parse_args(ctx, args)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        params = [p for p in self.get_params(ctx) if not getattr(p, "hidden", False)]
        widest = max((len(flag_cell(p)) for p in params), default=10)
        console = _console()
        flag_width = min(widest, max(20, console.width // 2 - 8))
        parts: list[Any] = [Padding(_usage(self, ctx), (1, 1, 0, 1))]
        if self.help:
            parts.append(Padding(paragraphs(self.help), (1, 1, 1, 1)))
        for name in panel_names(params):
            chosen = [p for p in params if panel_of(p) == name]
            parts.append(
                Panel(
                    options_table(chosen, flag_width),
                    title=name,
                    title_align="left",
                    box=box.ROUNDED,
                    border_style="dim",
                )
            )
        _print([*parts, *_epilog(self.epilog)], console)


class Group(TyperGroup):
    """The app: its commands with their one-line help, then examples."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        console = _console()
        table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False, expand=True)
        names = self.list_commands(ctx)
        table.add_column(no_wrap=True, min_width=max(map(len, names), default=8), style="bold cyan")
        table.add_column(ratio=1)
        for name in names:
            command = self.get_command(ctx, name)
            table.add_row(name, paragraphs((command.help or "").split("\n\n")[0]) if command else "")
        parts: list[Any] = [Padding(_usage(self, ctx), (1, 1, 0, 1))]
        if self.help:
            parts.append(Padding(paragraphs(self.help), (1, 1, 1, 1)))
        parts.append(Panel(table, title="Commands", title_align="left", box=box.ROUNDED, border_style="dim"))
        parts.append(Padding(Text(self._options_line(ctx)), (0, 1, 1, 1)))
        _print([*parts, *_epilog(self.epilog)], console)

    def _options_line(self, ctx: Any) -> str:
        """What this group itself accepts (the app: --version too; `scorecli cache`: --help only),
        and how to see a command's help, named as the usage line names the group."""
        params = [p for p in self.get_params(ctx) if not getattr(p, "hidden", False)]
        flags = [o for p in params for o in p.opts if o.startswith("--") and o != "--help"]
        return f"Options: {', '.join(['--help (this text)', *flags])}; {ctx.command_path} COMMAND --help, a command's."


def usage_errors() -> tuple[type[Exception], ...]:
    """The exceptions typer and click raise for a command line they cannot parse (exit 2): typer
    >= 0.20 raises its own vendored click's exceptions; older typer, click's."""
    found = [t for t in (getattr(typer, "TyperException", None),) if t is not None]
    try:
        import click

        found.append(click.ClickException)
    except ImportError:
        pass
    return tuple(found)
