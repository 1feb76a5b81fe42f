"""How many rows each window holds (docs/long-jobs.md): a fixed number, or windows that start
small and then take the size one window scores in a time target, so that the first rows are
scored, written and kept, and the first ETA shows, within seconds whatever the model and device,
and a long job still runs in large windows.

Growing windows are 1, 2 and 4 rows (the prelude: a process's first window pays the warm-up,
so its rate is a poor guide), then the rows one window scores in `seconds` at the rate the 2-row window
measured (a resumed run's first window, when that one was not kept), which every later window keeps. Doubling all the way (1, 2, 4, ... up to
the cap) cost a job of 150 MiniLM rows 8 windows, each ending with one CPU stream idle while the
other finishes the window's last batch (benchmarks/RESULTS.md, issue 36); jumping to the
measured size costs it 4.

The sizes are the job's (a resumed job must cut its remaining rows as an uninterrupted run does,
since which rows share a batch moves float32 scores in their last bits): the prelude follows from
the sizes kept; the measured size is recorded in the job (`on_fixed`, `engine.checkpoint`) with the
window it starts at, before any window after the prelude runs. Knows nothing about files, models
or progress.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

PRELUDE = 3  # windows of 1, 2, 4 rows before the size comes from a measured rate


class Schedule:
    """Rows per window, one `next()` per window, told how long each window took (`took`).

    Args:
        cap: the most rows of a window (`--window-rows`).
        seconds: the time target of a window (None: every window `cap`).
        kept: the sizes of the windows an earlier run of the job kept, in order (`--resume`).
        fixed: the size the job settled on earlier, if it did ...
        fixed_from: ... from its window of this index on (the ones before: the prelude).
        on_fixed: called once with the size and the index of its first window when it is chosen
            (the job records them).
    """

    def __init__(
        self,
        cap: int,
        seconds: float | None = None,
        kept: Sequence[int] = (),
        fixed: int | None = None,
        on_fixed: Callable[[int, int], None] | None = None,
        fixed_from: int = 0,
    ):
        self.cap = cap
        self.seconds = seconds
        self.fixed = fixed or (cap if seconds is None else None)
        self.fixed_from = fixed_from if fixed else 0
        self.count = len(kept)  # windows handed out, the kept ones included
        self.last = kept[-1] if kept else 0  # the size of the last window handed out
        self.rate: float | None = None  # rows per second of the last window measured
        self.warm_rate: float | None = None  # of this process's first window: a guide only while no other is known
        self.on_fixed = on_fixed
        self.warm = False  # the first window of a run pays the warm-up (kernels, allocator): not measured

    def next(self) -> int:
        """The size of the next window."""
        rate = self.rate or self.warm_rate
        budget = None if rate is None or self.seconds is None else rate * self.seconds
        if self.fixed and self.count >= self.fixed_from:
            size = self.fixed
        else:  # the prelude (or, for a job file without its size, doubling until `took` chooses one)
            size = min(2 * self.last or 1, self.cap)
            if budget is not None and size > budget:  # a slow model: twice as many rows would take too long
                size = self._fix(max(1, min(self.last, int(budget))))
        self.count += 1
        self.last = size
        return size

    def took(self, rows: int, seconds: float) -> None:
        """A window of `rows` rows was scored in `seconds`. Once the prelude's windows are handed
        out, the first one measured chooses every later window's size (the rows it would score in
        `seconds`), recorded before its own rows are kept."""
        if rows and seconds > 0:
            rate = rows / seconds
            if self.warm:
                self.rate = rate
            elif self.warm_rate is None:
                self.warm_rate = rate
            if not self.fixed and self.seconds is not None and self.count >= PRELUDE:
                self._fix(max(1, min(self.cap, int(rate * self.seconds))))
        self.warm = True

    def _fix(self, size: int) -> int:
        self.fixed, self.fixed_from = size, self.count
        if self.on_fixed is not None:
            self.on_fixed(size, self.count)
        return size
