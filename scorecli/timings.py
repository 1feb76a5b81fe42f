"""Where a run's time goes, stage by stage: named marks, said on stderr when the CLI is asked
(`SCORECLI_TIMINGS=1`), as one line `timings: name +s, ...` at the end of the run.

For benchmarks and start-up work (benchmarks/gpu_compare.py reads the line); a mark costs a
list append. Knows nothing about what is measured.
"""

from __future__ import annotations

import time

_MARKS: list[tuple[str, float]] = []
_ON: list[bool] = []


def enable(started: float) -> None:
    """Record marks from now on, counted from `started` (`time.perf_counter`)."""
    _ON.append(True)
    _MARKS.append(("start", started))


def mark(name: str) -> None:
    """Note that stage `name` ended now (the first time only)."""
    if _ON and all(n != name for n, _ in _MARKS):
        _MARKS.append((name, time.perf_counter()))


def line() -> str | None:
    """`timings: imports 1.2 s, model loaded +0.6 s, ...` (each mark after the one before), or None."""
    if not _ON or len(_MARKS) < 2:
        return None
    parts = [f"{name} {t - _MARKS[0][1]:.2f} s" for name, t in _MARKS[1:]]
    return "timings (since start): " + ", ".join(parts)
