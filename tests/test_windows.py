"""Window sizes (`engine.windows.Schedule`): a prelude of 1, 2, 4 rows, then the rows one window
scores in the time target at the rate measured, recorded with the window it starts at, so that a
resumed job cuts its rows as the uninterrupted run did."""

from __future__ import annotations

from scorecli.engine.windows import Schedule


def run(schedule: Schedule, rows: int, seconds_per_row: float, warm_up: float = 0.0) -> list[int]:
    """The sizes a job of `rows` rows gets, each window taking `seconds_per_row` per row (the
    process's first window `warm_up` seconds more), decided in the order `engine.local` asks:
    the next window's size before this window runs."""
    sizes, left = [], rows
    size = schedule.next()
    first = True
    while left > 0:
        now = min(size, left)
        left -= now
        sizes.append(now)
        upcoming = schedule.next() if left > 0 else None  # prefetched before this window runs
        schedule.took(now, now * seconds_per_row + (warm_up if first else 0.0))
        first = False
        size = upcoming or 0
    return sizes


def test_a_fast_job_jumps_to_one_large_window_after_the_prelude():
    recorded = []
    sizes = run(Schedule(2048, 30.0, on_fixed=lambda *a: recorded.append(a)), 150, 0.1, warm_up=2.0)
    assert sizes == [1, 2, 4, 143]  # doubling all the way took 8 windows: 1, 2, ..., 64, 23
    assert recorded == [(300, 3)]  # 30 s at 10 rows/s, from the 4th window on


def test_the_size_follows_the_measured_rate_and_the_cap():
    assert run(Schedule(2048, 30.0), 1000, 0.5)[:5] == [1, 2, 4, 60, 60]
    assert run(Schedule(100, 30.0), 1000, 0.01)[:5] == [1, 2, 4, 100, 100]


def test_a_slow_model_stops_growing_in_the_prelude():
    recorded = []
    sizes = run(Schedule(2048, 30.0, on_fixed=lambda *a: recorded.append(a)), 10, 20.0)
    # the 2-row window was asked for before any window ran; then 4 rows would take 80 s
    assert sizes == [1, 2] + [1] * 7
    assert recorded == [(1, 2)]


def test_resumed_after_the_prelude_began_cuts_the_rows_as_the_first_run():
    recorded = []
    whole = run(Schedule(2048, 30.0, on_fixed=lambda *a: recorded.append(a)), 1000, 0.5)
    ((size, first),) = recorded
    # killed with two parts kept: the size was recorded before the second was (it was measured on it)
    resumed = run(Schedule(2048, 30.0, kept=whole[:2], fixed=size, fixed_from=first), 1000 - 3, 0.05)
    assert whole[:2] + resumed == whole
    # killed with one part kept, before the size was chosen: the rate this run measures on its first window
    fresh = run(Schedule(2048, 30.0, kept=whole[:1]), 1000 - 1, 0.5)
    assert whole[:1] + fresh == whole


def test_fixed_windows_without_a_time_target():
    assert run(Schedule(7), 20, 1.0) == [7, 7, 6]
