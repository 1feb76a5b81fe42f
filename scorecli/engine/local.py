"""Windows of rows through a `Scorer`, the next window prepared while this one runs.

Knows nothing about files, progress bars or the command line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa

from scorecli.io.readers import RawRow
from scorecli.timings import mark

if TYPE_CHECKING:
    from scorecli.scorer import Prepared, Scorer


def iter_windows(rows: Iterable[RawRow], size: int):
    """Group rows into lists of at most `size`."""
    window: list[RawRow] = []
    for row in rows:
        window.append(row)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window


def score_stream(
    scorer: Scorer, rows: Iterable[RawRow], on_batch: Callable[[int, int], None] | None = None,
    prefetch: bool = True,
) -> Iterator[tuple[Prepared, pa.Table]]:
    """Score rows window by window, preparing the next window while this one runs.

    Yields each window's `Prepared` (for row counts) and output table, in input order.
    Memory holds at most two windows, however many rows the input has. `prefetch=False`
    prepares each window only when it is needed (a baseline for tests and benchmarks).
    """
    windows = iter_windows(rows, scorer.config.window_rows)

    def next_prepared() -> Prepared | None:
        window = next(windows, None)
        return None if window is None else scorer.prepare(window)

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scorecli-prepare")
    future = None
    try:
        future = pool.submit(next_prepared)
        while (prepared := future.result()) is not None:
            mark("window prepared")
            if prefetch:
                future = pool.submit(next_prepared)
            table = scorer.run(prepared, on_batch)
            if not prefetch:
                future = pool.submit(next_prepared)
            yield prepared, table
    finally:
        # on failure, do not wait for a reader blocked on a stalled stdin (the CLI exits at once)
        pool.shutdown(wait=future is None or future.done(), cancel_futures=True)

