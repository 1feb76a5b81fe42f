"""What a run counts (rows, skipped rows, items, tokens, NaN scores), its rich progress line on
stderr and its one-line summary; shared by the local engine (`run`) and Ray (`ray`).

Knows nothing about models, flags or how rows are scored.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


@dataclass
class Counts:
    """A run's counters; `resumed`: rows an earlier run of the job kept."""

    rows: int = 0
    skipped: int = 0
    items: int = 0
    tokens: int = 0
    nan: int = 0
    resumed: int = 0
    started: float = field(default_factory=time.perf_counter)

    def add_rows(self, table: pa.Table) -> None:
        """Count an output table's rows and skipped rows (those with an `error`)."""
        self.rows += table.num_rows
        if "error" in table.column_names:
            self.skipped += len(table) - table["error"].null_count

    def add_work(self, items: int, tokens: int) -> None:
        self.items += items
        self.tokens += tokens

    def add_table(self, table: pa.Table) -> None:
        """Count an output table's rows and the items and tokens it holds."""
        self.add_rows(table)
        self.add_work(
            pc.sum(pc.list_value_length(table["score"])).as_py() or 0, pc.sum(table["num_tokens"]).as_py() or 0
        )

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / max(time.perf_counter() - self.started, 1e-9)


class Tracker:
    """A progress line over `total` rows (None: unknown) that starts at `done`, fed by `Counts`.

    Within a window (`window`) the rows advance with the items scored (`work`), so the bar moves
    and the ETA shows after the first batches, however many rows a window holds."""

    def __init__(self, console: Console | None, total: int | None, label: str = "scoring", done: int = 0):
        self.progress = progress_bar(console, total)
        self.counts = Counts(resumed=done)
        self.task = self.progress.add_task(label, total=total, completed=done, items=0, tps=0.0)
        self.done = done  # rows of the windows finished
        self.running = (0, 0, 0)  # the window now running: rows, items, items scored

    def __enter__(self) -> Tracker:
        self.progress.__enter__()
        self.counts.started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def window(self, window: Any) -> None:
        """A window of `num_rows` rows holding `num_items` items starts (`scorer.Prepared`)."""
        self.running = (window.num_rows, window.num_items, 0)

    def work(self, items: int, tokens: int) -> None:
        """Items and tokens done (after a batch)."""
        self.counts.add_work(items, tokens)
        rows, total, done = self.running
        self.running = (rows, total, done + items)
        fields = {"items": self.counts.items, "tps": self.counts.tokens_per_second}
        if total:
            self.progress.update(self.task, completed=self.done + rows * min((done + items) / total, 1.0), **fields)
        else:
            self.progress.update(self.task, **fields)

    def rows(self, n: int) -> None:
        """`n` more rows are finished (a window, a block)."""
        self.done += n
        self.running = (0, 0, 0)
        self.progress.update(self.task, completed=self.done, items=self.counts.items, tps=self.counts.tokens_per_second)


def progress_bar(console: Console | None, total: int | None) -> Progress:
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn() if total else TextColumn(""),
        TextColumn("{task.completed:,.0f}" + (f"/{total:,} rows" if total else " rows")),
        TextColumn("{task.fields[items]:,} items"),
        TextColumn("{task.fields[tps]:,.0f} tok/s"),
        TimeElapsedColumn(),
    ]
    if total:
        columns.append(TimeRemainingColumn())
    # a live bar only on a terminal: in a log it would leave a blank line
    live = console is not None and console.is_terminal
    return Progress(*columns, console=console or Console(quiet=True), disable=not live, transient=True)


def summary(console: Console, counts: Counts, seconds: float, out: str, note: str = "", more: str = "") -> None:
    """One line: rows scored (and skipped), items, tokens, time (start-up and scoring apart),
    items/s of the scoring, NaN scores; `note`: how the run's mode was chosen, when it was not
    the default; `more`: what the run adds at its end (the score cache's hits and misses).
    `seconds`: since the process started; scoring counts from `counts.started`."""
    scoring = max(time.perf_counter() - counts.started, 0.0)
    startup = max(seconds - scoring, 0.0)
    items_s = counts.items / scoring if scoring > 0 else 0.0
    scored = counts.rows - counts.skipped
    line = (
        f"scored {scored:,} rows, {counts.items:,} items, {counts.tokens:,} tokens in {seconds:.1f} s "
        f"(start-up {startup:.1f} s, scoring {scoring:.1f} s: {items_s:,.1f} items/s) -> {out}"
    )
    if note:
        line += f" ({note})"
    if counts.resumed:
        line = f"resumed after {counts.resumed:,} rows; " + line
    if counts.skipped:
        line += f"; skipped {counts.skipped:,} bad rows"
    if counts.nan:
        line += f"; {counts.nan:,} items scored NaN or infinite (written as null)"
    if more:
        line += f"; {more}"
    console.print(line, markup=False, emoji=False, soft_wrap=True)


@contextmanager
def loading(console: Console | None, name: str) -> Iterator[None]:
    """`loading NAME ...` on a terminal while the model loads and checks itself, before the
    progress line (transient, like it; nothing in a log, where one line per error is the rule)."""
    if console is None or not console.is_terminal:
        yield
        return
    with console.status(f"loading {name} ...", spinner="dots"):
        yield


def note(console: Console | None, line: str | None) -> None:
    """A one-line note on stderr, as it is (none with --quiet, or when there is nothing to say)."""
    if console is not None and line:
        console.print(line, markup=False, emoji=False, highlight=False, soft_wrap=True)
