"""The one run lifecycle (docs/ARCHITECTURE.md): a job's windows, in input order, into its sink.

`run_job` does for every engine what a run is beyond scoring: it keeps a checkpointed job's
parts on failure (`Checkpoint.keeping`), goes on as a resumed job began (its runtime, its
windows: `Checkpoint.same_runtime`, `Checkpoint.part_rows`), opens the sink (the checkpoint's
parts, or a file, object or stream straight through: `io.sinks`) once the first window says
the output's metadata, drives the progress line and prints the summary. An `Engine` is only
where windows are scored: `engine.local` in this process, `engine.ray` on Ray workers.
Knows nothing about tokenization, models or where bytes go.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from scorecli.config import ScoreConfig
from scorecli.core.metrics import DEFAULT_K, Ranking
from scorecli.engine.checkpoint import Checkpoint
from scorecli.engine.progress import Counts, Tracker, note, summary
from scorecli.io.columns import add_ranking
from scorecli.io.output import Target
from scorecli.io.parts import Part
from scorecli.io.sinks import Sink, open_sink


@dataclass
class Window:
    """One scored window, in input order: its output `table`, or (a Ray worker wrote it into the
    store) the `part` that holds it, with its counts. `metadata`: the output's metadata."""

    rows: int
    metadata: dict[str, str]
    table: pa.Table | None = None
    part: Part | None = None
    counts: Counts | None = None  # a written part's rows, skipped rows, items and tokens
    nulled: dict[str, int] = field(default_factory=dict)
    counted: bool = False  # the engine fed its items and tokens to the tracker already (per batch)


class Scoring(Protocol):
    """A started engine: where this run's windows are scored."""

    label: str  # the progress line's label
    mode_note: str  # how the run's mode was chosen, for the summary ("" when the default)

    def total(self) -> int | None:
        """Input rows this run scores (None: not known up front)."""
        ...

    def windows(self, work: Callable[[int, int], None], begin: Callable[[Any], None] | None = None) -> Iterator[Window]:
        """The scored windows in input order; `work(items, tokens)` after each batch, if known;
        `begin(window)` as a window of `num_rows` rows and `num_items` items starts, if known."""
        ...

    def empty(self) -> tuple[pa.Table | None, dict[str, str]]:
        """For a run that scored no window: the output of no rows (None when an earlier run's
        parts hold rows) and the output's metadata."""
        ...


class Engine(Protocol):
    def start(self, cfg: ScoreConfig, part_rows: Callable[[int], int]) -> AbstractContextManager[Scoring]:
        """Start scoring `cfg`'s job; `part_rows(n)` gives the rows per window a resumed job keeps."""
        ...


def run_job(
    cfg: ScoreConfig,
    target: Target,
    checkpoint: Checkpoint | None,
    engine: Engine,
    console,
    started: float | None = None,
) -> None:
    """Run one job: `engine`'s windows into `checkpoint`'s parts, or `target` straight through.
    Progress and the summary go to `console` (None: silent); `started`: when the command began."""
    start = started if started is not None else time.perf_counter()
    done = checkpoint.rows_done if checkpoint else 0
    with checkpoint.keeping() if checkpoint else nullcontext():
        if checkpoint is not None:  # a resumed job goes on as it began: its runtime, its windows
            cfg = checkpoint.same_runtime(cfg)
        pin = checkpoint.part_rows if checkpoint else (lambda rows: rows)
        with engine.start(cfg, pin) as scoring:
            total = scoring.total()
            ranking = _kept_ranking(cfg, checkpoint)
            with Tracker(console, None if total is None else done + total, scoring.label, done) as tracker:
                _drive(scoring, checkpoint, target, tracker, console, (ranking, cfg.labels_field))
    tracker.counts.resumed = done
    if console is not None:
        line = ranking.line()
        summary(console, tracker.counts, time.perf_counter() - start, target.out, scoring.mode_note, line)


def _kept_ranking(cfg: ScoreConfig, checkpoint: Checkpoint | None) -> Ranking:
    """Ranking metrics over the rows an earlier run of the job kept (their parts hold the scores
    and labels), to go on from."""
    ranking = Ranking(cfg.top_k or DEFAULT_K)
    names = checkpoint.store.names() if checkpoint is not None and checkpoint.rows_done else []
    if names and cfg.labels_field in checkpoint.store.schema(names[0]).names:
        for table in checkpoint.store.tables():
            add_ranking(ranking, table, cfg.labels_field)
    return ranking


def _drive(
    scoring: Scoring,
    checkpoint: Checkpoint | None,
    target: Target,
    tracker: Tracker,
    console,
    ranked: tuple[Ranking, str],
) -> None:
    """Windows into the sink, opened with the first window's metadata; closed at the end (the
    output appears, with the ranking metrics of `ranked`'s labels field in its metadata),
    aborted on failure."""
    sink: Sink | None = None
    ranking, labels_field = ranked

    def opened(metadata: dict[str, str]) -> Sink:
        from scorecli.checks.drift import stderr_line  # checks load torch, which the lifecycle does not need

        note(console, stderr_line(metadata))  # approximate scores (onnx-int8) say so
        return checkpoint.sink(metadata) if checkpoint else open_sink(target, metadata)

    try:
        for window in scoring.windows(tracker.work, tracker.window):
            sink = sink or opened(window.metadata)
            if window.part is not None:
                sink.record(window.part, window.nulled)  # type: ignore[attr-defined]  # parts only
                if checkpoint is not None and labels_field in checkpoint.store.schema(window.part.file).names:
                    add_ranking(ranking, checkpoint.store.table(window.part.file), labels_field)
                tracker.counts.rows += window.counts.rows
                tracker.counts.skipped += window.counts.skipped
                tracker.counts.add_work(window.counts.items, window.counts.tokens)
            else:
                tracker.counts.add_rows(window.table) if window.counted else tracker.counts.add_table(window.table)
                add_ranking(ranking, window.table, labels_field)
                sink.write(window.table)
            tracker.rows(window.rows)
        if sink is None:
            table, metadata = scoring.empty()
            sink = opened(metadata)
            if table is not None:
                sink.write(table)
        sink.close(ranking.metadata())
    except BaseException:
        if sink is not None:
            sink.abort()
        raise
    tracker.counts.nan = sink.nulled.get("score", 0)
