"""What the commands check before a model loads, and where a flag's value came from: the working
folder, an explicit cache folder and runtime, the model a name points to (`model.default_model`).

Shared by `scorecli score` (`cli_score`), `inspect` and `bench` (`cli_tools`); each check is a
one-line UsageError (exit 2) or a note on stderr. Knows nothing about which commands exist or what
they run.
"""

from __future__ import annotations

import os

import typer

from scorecli import bytecode
from scorecli.errors import UsageError
from scorecli.model.cache import check_writable
from scorecli.model.default_model import resolve_model
from scorecli.model.gguf import default_cache_dir
from scorecli.runtimes import runtime_info
from scorecli.stderr import say


def given(ctx: typer.Context, name: str, source: str = "COMMANDLINE") -> bool:
    """Whether the parameter `name` was given on the command line (or where `source` names: "ENVIRONMENT"),
    not a default."""
    found = ctx.get_parameter_source(name)
    return found is not None and found.name == source


def check_cache_and_runtime(
    ctx: typer.Context, cache_dir: str | None, runtime: str = "auto", quiet: bool = False
) -> None:
    """An explicit --cache-dir (or $SCORECLI_CACHE_DIR, named as the user gave it) that cannot be
    written, or an explicit ONNX runtime whose packages are missing, stop the run before the model
    loads (`--runtime auto` falls back instead). Before torch is imported: where the environment
    keeps no bytecode for it, it goes to the cache folder (`bytecode`)."""
    check_working_folder()
    from_env = given(ctx, "cache_dir", "ENVIRONMENT")
    check_writable(cache_dir, f"$SCORECLI_CACHE_DIR={cache_dir}" if from_env else f"--cache-dir {cache_dir}")
    if (note := bytecode.cache_bytecode(cache_dir or default_cache_dir())) and not quiet:
        say(f"note: {note}")
    if runtime_info(runtime).needs is not None:  # the runtime's module imports torch: not for the others
        from scorecli.runtimes.onnx import check_packages

        check_packages(runtime)


def check_working_folder() -> None:
    """UsageError when the current directory is gone (deleted after the shell entered it): torch's
    MKL stops the process on import there ("Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so"),
    and a relative path cannot be made absolute (FileNotFoundError, exit 1)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise UsageError(
            "the current directory no longer exists (deleted after the shell entered it): cd into one that does"
        ) from None


def model_and_template(model: str | None, ctx: typer.Context | None = None, quiet: bool = False) -> tuple[str, str]:
    """(model path, default template) of --model or $SCORECLI_MODEL (a path, a Hub id, a bundled
    model's short name), else the default model (docs/models.md: Which models, by short name). A Hub id is asked
    for once, briefly: one that cannot be reached fails here, in one line (`model.hub`)."""
    choice = resolve_model(model, ctx is not None and given(ctx, "model", "ENVIRONMENT"))
    if choice.note and not quiet:
        say(f"note: {choice.note}")
    return choice.path, choice.template
