"""What `scorecli` says on stderr outside progress and the summary: one line each (docs/cli.md: Exit
codes). Errors (`fail`), notes and warnings (`one_line_warnings`: Python warnings as one line each),
and the one line of an interrupted run, said once (`say_interrupted`, `noting_interrupts`). Lines
are printed as they are: no markup, no emoji codes, control bytes escaped. Knows nothing about
flags or scoring.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console

from scorecli.errors import Notice, first_line
from scorecli.process import finish, interrupted_code

# paths and user text are printed as they are: no markup, no :emoji: codes
err = Console(stderr=True, highlight=False, markup=False, emoji=False)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

_interrupt_notes: list[str] = []  # what an interrupted run kept (typer turns the interrupt into exit code 130)
_interrupt_said: list[bool] = []
# what a second signal says while the first still unwinds, before its note is known (`noting_interrupts`)
_interrupt_fallback: list[Callable[[], str | None]] = []


def say_interrupted(message: str = "") -> None:
    """The one line of an interrupted run, once (a second signal may come while it is said)."""
    if not _interrupt_said:
        _interrupt_said.append(True)
        fallback = _interrupt_fallback[-1]() if _interrupt_fallback and not _interrupt_notes else None
        say(message or (_interrupt_notes or [fallback or "interrupted: no output written"])[-1])


@contextmanager
def noting_interrupts(kept: Callable[[], str | None] | None = None) -> Iterator[None]:
    """Note the message an interrupt carries out of the run (what it kept). `kept()`: the line a
    second signal says while the first still unwinds (threads joined, a window's batch finishing:
    seconds), before that message exists; in memory only, since the process then exits at once."""
    if kept is not None:
        _interrupt_fallback.append(kept)
    try:
        yield
    except KeyboardInterrupt as exc:
        if str(exc):
            _interrupt_notes.append(str(exc))
        raise
    finally:
        if kept is not None:
            _interrupt_fallback.remove(kept)


def say(message: str) -> None:
    """One line on stderr, printed as it is: no markup, no emoji, control bytes escaped. A stderr
    that went away (the terminal of an ssh session that closed: EIO) loses the line, not the
    run's exit code."""
    try:
        err.print(one_line(message), markup=False, emoji=False, highlight=False, soft_wrap=True)
    except OSError:
        pass


def one_line(text: str) -> str:
    """`text` as one printable line: control bytes (a newline in a file name) escaped."""
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], text.strip())
    return text.encode("utf-8", "backslashreplace").decode("utf-8")  # undecodable file names


def fail(message: str, code: int) -> None:
    say(f"error: {message}")
    finish(code)


def one_line_warnings(quiet: bool) -> None:
    """Warnings as one line each (`warning: ...`); under --quiet only scorecli's own.
    torch's note that flex attention runs uncompiled (as documented on CPU) is not shown."""
    import warnings

    ours = os.path.dirname(os.path.abspath(__file__))  # scorecli's own modules
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
    warnings.filterwarnings("ignore", module=r"torch\._(inductor|dynamo)")  # the compiler's notes to its developers

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, Notice):
            if not quiet:
                say(f"note: {first_line(str(message))}")
        elif not quiet or os.path.abspath(filename).startswith(ours):
            say(f"warning: {first_line(str(message))}")

    warnings.showwarning = show


def interrupted(message: str = "") -> None:
    say_interrupted(message)
    finish(interrupted_code())


def quiet_transformers() -> None:
    """Our output is the only output: no "Loading weights" bars and no advice to model authors
    (e.g. a padding warning from a model's own forward) from transformers; its errors still show."""
    from transformers.utils import logging as hf_logging  # transformers loads only for a command that runs a model

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
