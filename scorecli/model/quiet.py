"""transformers' logging while a model loads: its "Loading weights" bar and its advice to model authors
off during a load, as they were afterwards (a library caller's stderr stays theirs), and a load
deferred to later (`load.Deferred`) run under the logging of the moment it was asked for. Imports
no torch; transformers only when a block runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


def as_loaded(build: Callable[[], T]) -> Callable[[], T]:
    """`build`, run later (a `Deferred` model: the audit, a torch batch, a probe not remembered)
    under transformers' progress bar and log verbosity as they are now, while the model loads (the
    caller's `quiet_transformers`): it prints what a load that built it at once prints."""
    from transformers.utils import logging as hf_logging

    shown, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()

    def built() -> T:
        shown_now, verbosity_now = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
        _set_logging(shown, verbosity)
        try:
            return build()
        finally:
            _set_logging(shown_now, verbosity_now)

    return built


def _set_logging(shown: bool, verbosity: int) -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity(verbosity)
    if shown:
        hf_logging.enable_progress_bar()
    else:
        hf_logging.disable_progress_bar()


@contextmanager
def quiet_transformers(bar: bool = True, advice: bool = True) -> Iterator[None]:
    """transformers' "Loading weights" bar (`bar`) and its log below errors (`advice`: advice to
    model authors, load reports, config warnings) off while the block runs (a model loads), as they
    were afterwards: a library caller's stderr stays theirs, a command's progress is its own, and a
    refused load is one line (`fit` says what matters in a report)."""
    if not (bar or advice):
        yield
        return
    from transformers.utils import logging as hf_logging

    shown, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    if bar:
        hf_logging.disable_progress_bar()
    if advice:
        hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if shown:
            hf_logging.enable_progress_bar()
