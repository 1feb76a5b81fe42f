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
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from scorecli.stderr import one_line


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
    after the first batches, however many rows a window holds. The time left is `Eta`'s."""

    def __init__(self, console: Console | None, total: int | None, label: str = "scoring", done: int = 0):
        self.progress = progress_bar(console, total)
        self.counts = Counts(resumed=done)
        self.eta = Eta(None if total is None else total - done)
        self.task = self.progress.add_task(label, total=total, completed=done, items=0, tps=0.0, eta_at=None)
        self.done = done  # rows of the windows finished
        self.running = (0, 0, 0)  # the window now running: rows, items, items scored

    def __enter__(self) -> Tracker:
        self.progress.__enter__()
        self.counts.started = self.eta.started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.progress.__exit__(*exc)
        except OSError:
            if exc[0] is None:
                raise
            # the bar's terminal went away with the run's interrupt (SIGHUP): the interrupt says why it stopped

    def window(self, window: Any) -> None:
        """A window of `num_rows` rows holding `num_items` items and costing `num_tokens` starts
        (`scorer.Prepared`)."""
        self.running = (window.num_rows, window.num_items, 0)
        self.eta.start(window.num_rows, int(window.num_tokens.sum()))

    def work(self, items: int, tokens: int) -> None:
        """Items and tokens done (after a batch)."""
        self.counts.add_work(items, tokens)
        rows, total, done = self.running
        self.running = (rows, total, done + items)
        fraction = min((done + items) / total, 1.0) if total else 0.0
        eta = self.eta.at(self.eta.worked(tokens))
        fields = {"items": self.counts.items, "tps": self.counts.tokens_per_second, "eta_at": eta}
        if total:
            self.progress.update(self.task, completed=self.done + rows * fraction, **fields)
        else:
            self.progress.update(self.task, **fields)

    def rows(self, n: int) -> None:
        """`n` more rows are finished (a window, a block)."""
        self.done += n
        self.running = (0, 0, 0)
        self.eta.finish(n, self.counts.tokens)
        self.progress.update(
            self.task,
            completed=self.done,
            items=self.counts.items,
            tps=self.counts.tokens_per_second,
            eta_at=self.eta.at(0.0),
        )

    def seconds_left(self) -> float | None:
        """The time left the progress line shows now (None: no ETA yet)."""
        at = self.progress.tasks[0].fields["eta_at"]
        return None if at is None else max(at - time.perf_counter(), 0.0)


class Eta:
    """When this run's rows will be done, counted in tokens: a row's tokens are known once its
    window is read (`start`), the rate is this run's own tokens per second (a resumed run's from
    its first batch on), and the rows not read yet cost the mean tokens of the rows read so far.
    Once the batches after the first have done as much work as the first, the first (which pays
    the warm-up) is left out of the rate. Blocks whose tokens are known only when done (Ray)
    count then. Knows nothing about how rows are scored.

    Args:
        rows: the rows this run scores (None: unknown, and no ETA).
    """

    def __init__(self, rows: int | None):
        self.rows = rows
        self.started = time.perf_counter()
        self.read = [0, 0]  # rows, tokens of the windows started
        self.finished = [0, 0]  # rows, tokens of the windows finished
        self.running = (0, 0)  # the window now running: rows, tokens
        self.counted = 0  # `Counts.tokens` when the last window finished
        self.warm: tuple[float, float] | None = None  # (when, tokens done) after the first batch (block)
        self.worked_tokens = 0  # forward tokens of the running window's batches done

    def start(self, rows: int, tokens: int) -> None:
        """A window of `rows` rows costing `tokens` starts (the first: the clock starts, so that
        reading the first rows and loading them is not taken for scoring)."""
        if not self.read[0]:
            self.started = time.perf_counter()
        self.running = (rows, tokens)
        self.read[0] += rows
        self.read[1] += tokens
        self.worked_tokens = 0

    def worked(self, tokens: int) -> float:
        """The running window's share done after a batch of `tokens` (its forward tokens)."""
        self.worked_tokens += tokens
        fraction = min(self.worked_tokens / self.running[1], 1.0) if self.running[1] else 0.0
        if self.warm is None:  # the run's first batch: it pays the warm-up
            self.warm = (time.perf_counter(), self.finished[1] + self.running[1] * fraction)
        return fraction

    def finish(self, rows: int, counted_tokens: int) -> None:
        """`rows` are done; `counted_tokens`: all tokens done so far (a block's, if not started)."""
        tokens = self.running[1] if self.running[0] else counted_tokens - self.counted
        if not self.running[0]:
            self.read[0] += rows
            self.read[1] += tokens
        self.finished[0] += rows
        self.finished[1] += tokens
        self.counted, self.running = counted_tokens, (0, 0)
        if self.warm is None:
            self.warm = (time.perf_counter(), float(self.finished[1]))

    def at(self, fraction: float) -> float | None:
        """When the run will be done (`time.perf_counter`), with `fraction` of the running
        window's items scored; None while nothing is measured or the rows are unknown."""
        now = time.perf_counter()
        done = self.finished[1] + self.running[1] * fraction
        if self.rows is None or not self.read[0] or done <= 0:
            return None
        since, base = self.started, 0.0
        if self.warm is not None and done - self.warm[1] >= self.warm[1] > 0:
            since, base = self.warm
        rate = (done - base) / max(now - since, 1e-9)
        left_rows = max(self.rows - self.finished[0] - self.running[0], 0)
        left = left_rows * self.read[1] / self.read[0] + self.running[1] * (1 - fraction)
        return now + left / rate if rate > 0 else None


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
        columns.append(EtaColumn())
    return quiet_unless_live(columns, console)


def quiet_unless_live(columns, console: Console | None) -> Progress:
    """A transient Progress of `columns` on `console` where that can redraw a line in place, else a
    disabled one on a quiet console: rich before 14.3 printed an empty line when a disabled
    Progress stopped on a console that is not a terminal, a blank line before the error or summary
    of every run under cron."""
    shown = live(console)
    return Progress(*columns, console=console if shown else Console(quiet=True), disable=not shown, transient=True)


def live(console: Console | None) -> bool:
    """Whether `console` can redraw a line in place: a terminal that is not dumb (TERM=dumb: rich
    draws nothing live there, yet the line it ends with stays). Elsewhere a live line would leave a
    blank line in the log."""
    return console is not None and console.is_terminal and not console.is_dumb_terminal


class EtaColumn(ProgressColumn):
    """The time left as `Eta` last estimated it, counting down between estimates."""

    def render(self, task) -> Text:
        at = task.fields.get("eta_at")
        if at is None:
            return Text("-:--:--", style="progress.remaining")
        left = int(max(at - time.perf_counter(), 0.0))
        return Text(f"{left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}", style="progress.remaining")


def counted(n: int, word: str) -> str:
    """`1 row`, `2 rows`, `1,500 rows`."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def summary(console: Console, counts: Counts, seconds: float, out: str, note: str = "", more: str = "") -> None:
    """One line: rows scored (and skipped), items, tokens, time (start-up and scoring apart),
    items/s of the scoring, NaN scores; `note`: how the run's mode was chosen, when it was not
    the default; `more`: what the run adds at its end (ranking metrics of labelled rows, the score
    cache's hits and misses).
    `seconds`: since the process started; scoring counts from `counts.started`."""
    scoring = max(time.perf_counter() - counts.started, 0.0)
    startup = max(seconds - scoring, 0.0)
    items_s = counts.items / scoring if scoring > 0 else 0.0
    scored = counts.rows - counts.skipped
    line = (
        f"scored {counted(scored, 'row')}, {counted(counts.items, 'item')}, {counted(counts.tokens, 'token')} "
        f"in {seconds:.1f} s (start-up {startup:.1f} s, scoring {scoring:.1f} s: {items_s:,.1f} items/s) -> {out}"
    )
    if note:
        line += f" ({note})"
    if counts.resumed:
        line = f"resumed after {counted(counts.resumed, 'row')}; " + line
    if counts.skipped:
        line += f"; skipped {counted(counts.skipped, 'bad row')}"
    if counts.nan:
        line += f"; {counted(counts.nan, 'item')} scored NaN or infinite (written as null)"
    if more:
        line += f"; {more}"
    console.print(one_line(line), markup=False, emoji=False, soft_wrap=True)  # a newline in --out stays one line


def cache_said(hits: int, misses: int, kept: int) -> str:
    """The summary's words for the score cache's counts: the whole output's, as its metadata holds
    them, which for a resumed job (`kept` rows an earlier run kept) counts more items than this run scored."""
    said = f"score cache: {hits:,} hits, {misses:,} misses"
    return said + (f" (the output's, its {counted(kept, 'kept row')} included)" if kept else "")


@contextmanager
def tracked(total: int) -> Iterator[Tracker]:
    """A progress line on stderr over `total` rows, for a library caller who asked for one."""
    with Tracker(Console(stderr=True), total) as tracker:
        yield tracker


@contextmanager
def loading(console: Console | None, name: str) -> Iterator[None]:
    """`loading NAME ...` on a terminal while the model loads and checks itself, before the
    progress line (transient, like it; nothing in a log, where one line per error is the rule)."""
    if console is None or not live(console):
        yield
        return
    # braille dots where the terminal takes UTF-8; an ASCII locale (PYTHONUTF8=0 under LANG=C) printed
    # them as `\u280b`, a new escape each frame: a bar of plain characters there, as rich draws its own
    spinner = "dots" if console.encoding.startswith("utf") else "line"
    with console.status(f"loading {name} ...", spinner=spinner):
        yield


def note(console: Console | None, line: str | None) -> None:
    """A one-line note on stderr, as it is (none with --quiet, or when there is nothing to say)."""
    if console is not None and line:
        console.print(one_line(line), markup=False, emoji=False, highlight=False, soft_wrap=True)
