"""How many rows each window holds (docs/long-jobs.md): a fixed number, or windows that start at
one row and double while one takes less than a time target, so that the first rows are scored,
written and kept, and the first ETA shows, within seconds whatever the model and device.

The sizes are the job's (a resumed job must cut its remaining rows as an uninterrupted run does,
since which rows share a batch moves float32 scores in their last bits): while windows double,
the sizes follow from the ones kept; once the time target stops the growth, the size it settled
on is recorded in the job (`on_fixed`, `engine.checkpoint`) and every later window has it.
Knows nothing about files, models or progress.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class Schedule:
    """Rows per window, one `next()` per window, told how long each window took (`took`).

    Args:
        cap: the most rows of a window (`--window-rows`).
        seconds: the time target: grow while a window would take less (None: every window `cap`).
        kept: the sizes of the windows an earlier run of the job kept, in order (`--resume`).
        fixed: the size the job settled on earlier, if it did.
        on_fixed: called once with the size when growing stops (the job records it).
    """

    def __init__(
        self,
        cap: int,
        seconds: float | None = None,
        kept: Sequence[int] = (),
        fixed: int | None = None,
        on_fixed: Callable[[int], None] | None = None,
    ):
        self.cap = cap
        self.seconds = seconds
        self.fixed = fixed or (cap if seconds is None else None)
        self.last = kept[-1] if kept else 0  # the size of the last window handed out
        self.rate: float | None = None  # rows per second of the last window measured
        self.on_fixed = on_fixed
        self.warm = False  # the first window of a run pays the warm-up (kernels, allocator): not measured

    def next(self) -> int:
        """The size of the next window."""
        if self.fixed:
            size = self.fixed
        elif not self.last:
            size = 1
        else:
            size = min(2 * self.last, self.cap)
            budget = None if self.rate is None or self.seconds is None else self.rate * self.seconds
            if budget is not None and size > budget:  # twice as many rows would take too long
                self._fix(max(1, min(self.last, int(budget))))
                size = self.fixed or size
            elif size == self.cap:
                self._fix(size)
        self.last = size
        return size

    def took(self, rows: int, seconds: float) -> None:
        """A window of `rows` rows was scored in `seconds`."""
        if rows and seconds > 0 and self.warm:
            self.rate = rows / seconds
        self.warm = True

    def _fix(self, size: int) -> None:
        self.fixed = size
        if self.on_fixed is not None:
            self.on_fixed(size)
