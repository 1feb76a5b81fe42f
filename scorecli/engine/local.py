"""Windows of rows through a `Scorer`, the next window prepared while this one runs.

Knows nothing about files, progress bars or the command line.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import TYPE_CHECKING

import pyarrow as pa

from scorecli.engine.windows import Schedule
from scorecli.io.readers import RawRow
from scorecli.timings import mark

if TYPE_CHECKING:
    from scorecli.scorer import Prepared, Scorer


def score_stream(
    scorer: Scorer,
    rows: Iterable[RawRow],
    on_batch: Callable[[int, int], None] | None = None,
    prefetch: bool = True,
    windows: Schedule | None = None,
    on_window: Callable[[Prepared], None] | None = None,
) -> Iterator[tuple[Prepared, pa.Table]]:
    """Score rows window by window, preparing the next window while this one runs.

    Yields each window's `Prepared` (for row counts) and output table, in input order.
    Memory holds at most two windows, however many rows the input has. `prefetch=False`
    prepares each window only when it is needed (a baseline for tests and benchmarks).
    `windows`: how many rows each window holds (default: the config's, `engine.windows`);
    `on_window(prepared)` is called as a window starts running, before its batches.
    """
    cfg = scorer.config
    sizes = windows or Schedule(cfg.window_rows, cfg.window_seconds)
    rows = iter(rows)

    def prepare(size: int) -> Prepared | None:  # in the pool's thread; `size` was chosen in this one, in order
        window = list(islice(rows, size))
        return scorer.prepare(window) if window else None

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scorecli-prepare")
    future = None
    try:
        future = pool.submit(prepare, sizes.next())
        while (prepared := future.result()) is not None:
            mark("window prepared")
            if prefetch:
                future = pool.submit(prepare, sizes.next())
            if on_window is not None:
                on_window(prepared)
            started = time.perf_counter()
            table = scorer.run(prepared, on_batch)
            sizes.took(prepared.num_rows, time.perf_counter() - started)
            if not prefetch:
                future = pool.submit(prepare, sizes.next())
            yield prepared, table
    finally:
        # on failure, do not wait for a reader blocked on a stalled stdin (the CLI exits at once)
        pool.shutdown(wait=future is None or future.done(), cancel_futures=True)
