"""`scorecli cache info` and `scorecli cache prune` (docs/long-jobs.md: Nightly jobs): the command line of a
score cache (`scorecli.cache.admin` does the work). Errors and exit codes are the app's (`cli.main`).
"""

from __future__ import annotations

import re
from typing import Annotated

import typer

from scorecli import options as o
from scorecli.help import Command, Group
from scorecli.model.default_model import resolve
from scorecli.options import opt

cache_app = typer.Typer(
    cls=Group,
    no_args_is_help=True,
    epilog=o.CACHE_EXAMPLES,
    help="What a score cache (scorecli score --score-cache) holds, and pruning it.",
)
_Location = Annotated[
    str,
    typer.Argument(metavar="LOCATION", show_default=False, rich_help_panel=o.LONG, help=o.LOCATION, callback=o.home),
]


@cache_app.command("info", cls=Command, epilog=o.CACHE_EXAMPLES)
def cache_info(location: _Location) -> None:
    """Entries, size and ages of a score cache, per model."""
    from scorecli.cache.admin import info

    for line in info(location):
        typer.echo(line)


@cache_app.command("prune", cls=Command, epilog=o.CACHE_EXAMPLES)
def cache_prune(
    location: _Location,
    model: Annotated[
        str | None,
        opt(
            "--model",
            panel=o.LONG,
            help="Remove the entries of this model (a model as --model names it, or an identity from cache info).",
        ),
    ] = None,
    older_than: Annotated[str | None, opt("--older-than")] = None,
) -> None:
    """Remove a model's entries, or old ones; tidy damaged and temporary files."""
    from scorecli.cache.admin import prune

    if model is not None and not re.fullmatch(r"[0-9a-f]{8,32}", model):
        model, _ = resolve(model)
    typer.echo(prune(location, model, older_than))
