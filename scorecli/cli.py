"""The `scorecli` command line: its commands, and their errors as exit codes.

Thin by design: each command turns its flags into a call (`cli_score`: `score`; `cli_tools`:
`inspect`, `eval`, `bench`; `cli_cache`: `cache info` and `cache prune`), after checks it can make
before the model loads (`cli_checks`); this module names them, and `main` maps errors to exit
codes: 2 for bad usage or input, 1 otherwise, 130 / 143 / 129 after SIGINT / SIGTERM / SIGHUP
(`process`); each error is one line of plain text (no markup, no emoji codes, control bytes
escaped). A closed pipe on the output ends the process quietly by SIGPIPE. torch is imported only
inside commands, so `--help` is instant. The only environment reads are $SCORECLI_MODEL and
$SCORECLI_CACHE_DIR/$RAY_ADDRESS (through typer; the model's name then goes through
`model.default_model.resolve_model`, the resolution the library's `Scorer` calls too, which reads
$SCORECLI_MODEL itself when no name is given), $SCORECLI_TIMINGS and $SCORECLI_BYTECODE_CACHE (0:
no bytecode in the cache folder, `bytecode`). The flags themselves (panels, help) are declared in
`options`; `--help` is drawn by `help`.
"""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer

from scorecli import bytecode, timings
from scorecli import options as o
from scorecli.cli_cache import cache_app
from scorecli.cli_score import STARTED, score
from scorecli.cli_tools import bench, eval_, inspect
from scorecli.errors import OutputClosed, ScorecliError, error_line
from scorecli.help import Command, Group, usage_errors
from scorecli.model import lean_imports
from scorecli.process import finish, pipe_closed, reserve_standard_fds, watch_signals
from scorecli.stderr import fail, interrupted, say_interrupted
from scorecli.version import __version__

app = typer.Typer(
    cls=Group,
    add_completion=False,
    no_args_is_help=True,
    epilog=o.APP_EXAMPLES,
    help="Offline batch scoring with transformer rerankers, classifiers, embedding and reward models.",
)


def _print_version(value: bool) -> None:
    if value:
        print(f"scorecli {__version__}")
        raise typer.Exit()


@app.callback()
def _app(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Offline batch scoring with transformer rerankers, classifiers, embedding and reward models."""


app.command(cls=Command, epilog=o.SCORE_EXAMPLES)(score)
app.command(cls=Command, epilog=o.INSPECT_EXAMPLES)(inspect)
app.command(name="eval", cls=Command, epilog=o.EVAL_EXAMPLES)(eval_)
app.command(cls=Command, epilog=o.BENCH_EXAMPLES)(bench)
app.add_typer(cache_app, name="cache", help="What a score cache holds (info), and pruning it (prune).")


def main() -> None:
    """Console entry point: run the app and map errors to exit codes (docs/cli.md: Exit codes)."""
    STARTED.append(time.perf_counter())
    if os.environ.get("SCORECLI_TIMINGS"):
        timings.enable(STARTED[-1])
    watch_signals(say_interrupted)
    reserve_standard_fds()
    lean_imports.skip_unneeded()  # no command trains, generates or launches: model code without scipy &c.
    if os.environ.get("SCORECLI_BYTECODE_CACHE", "1") not in ("0", "off"):
        bytecode.keep_bytecode()  # where the environment keeps no bytecode for torch: in the cache folder
    try:
        code = app(standalone_mode=False)
    except OutputClosed:
        pipe_closed()
    except ScorecliError as exc:
        fail(str(exc), exc.exit_code)
    except KeyboardInterrupt as exc:
        interrupted(str(exc))
    except typer.Exit as exc:
        finish(exc.exit_code)
    except usage_errors() as exc:  # every parsing error of typer / click is a usage error
        # a group run without a command (`scorecli`, `scorecli cache`) has shown its help: no message
        fail(exc.format_message() or "no command given: the commands are listed above", 2)
    except typer.Abort:
        interrupted()
    except Exception as exc:  # noqa: BLE001 - anything unexpected: one line, exit 1
        fail(error_line(exc), 1)
    # Outside standalone mode typer returns exit codes instead of exiting, and turns
    # Ctrl-C (and SIGTERM) into 130 after the output was already discarded.
    if code == 130:
        interrupted()
    finish(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
