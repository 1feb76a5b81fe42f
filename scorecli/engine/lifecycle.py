"""The one run lifecycle (docs/ARCHITECTURE.md): a job's windows, in input order, into its sink.

`run_job` does for every engine what a run is beyond scoring: it keeps a checkpointed job's
parts on failure (`Checkpoint.keeping`), goes on as a resumed job began (its runtime, its
windows, its resolved device, dtype and attention: `Checkpoint.same_runtime`, `Checkpoint.blocks`,
`Checkpoint.same_choices`), opens the sink (the checkpoint's
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
from functools import partial
from typing import Any, Protocol

import pyarrow as pa

from scorecli.cache.reuse import Figures
from scorecli.checks.drift import stderr_line
from scorecli.config import ScoreConfig
from scorecli.core.metrics import DEFAULT_K, Ranking
from scorecli.engine.checkpoint import Checkpoint, Interrupted
from scorecli.engine.progress import Counts, Tracker, cache_said, note, summary
from scorecli.engine.windows import Schedule
from scorecli.errors import ScorecliError
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


@dataclass
class Closing:
    """What a run knows once every window is scored (docs/long-jobs.md: Nightly jobs): output metadata keys
    (the score cache's counts, the audit's figures), words for the summary line, lines said after
    it, and a failure that exits 1 once the output is written (`--audit-strict`)."""

    metadata: dict[str, str] = field(default_factory=dict)
    summary: str = ""
    lines: list[str] = field(default_factory=list)
    failure: str | None = None


class Scoring(Protocol):
    """A started engine: where this run's windows are scored."""

    label: str  # the progress line's label
    mode_note: str  # how the run's mode was chosen, for the summary ("" when the default)
    metadata: dict[str, str] | None  # the output's metadata, when known before a window is scored

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

    def closing(self) -> Closing:
        """After the last window, before the output is made (the audit runs here)."""
        ...


class Engine(Protocol):
    def start(self, cfg: ScoreConfig, blocks: Callable[[int], Schedule]) -> AbstractContextManager[Scoring]:
        """Start scoring `cfg`'s job; `blocks(n)`: the rows of each window of an engine that cuts
        its windows up front, n each for a new job, a resumed job's own (`Checkpoint.blocks`)."""
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
        blocks = partial(checkpoint.blocks, cfg) if checkpoint else Schedule
        # every input row kept by an earlier run: the output is made from the parts, no model loads
        kept = checkpoint is not None and not cfg.audit and checkpoint.all_kept(cfg)
        with nullcontext(_Kept(cfg, checkpoint)) if kept else engine.start(cfg, blocks) as scoring:
            if checkpoint is not None:  # before a row is scored, where the engine knows it already
                checkpoint.same_choices(scoring.metadata)
            total = scoring.total()
            ranking = _kept_ranking(cfg, checkpoint)
            with Tracker(console, None if total is None else done + total, scoring.label, done) as tracker:
                closing = _drive(scoring, checkpoint, target, tracker, console, (ranking, cfg.labels_field))
    tracker.counts.resumed = done
    if console is not None:
        more = "; ".join(x for x in (ranking.line(), closing.summary) if x)
        summary(console, tracker.counts, time.perf_counter() - start, target.out, scoring.mode_note, more)
        for line in closing.lines:
            note(console, line)
    if closing.failure is not None:
        raise ScorecliError(closing.failure)


class _Kept:
    """The `Scoring` of a resumed job whose parts hold every input row (`Checkpoint.all_kept`):
    no window to score, so no engine starts and no model loads; the output is the parts, with the
    metadata, summary and score cache counts the engine would have closed with."""

    label = "scoring"

    def __init__(self, cfg: ScoreConfig, checkpoint: Checkpoint):
        self.cfg, self.checkpoint = cfg, checkpoint
        self.metadata: dict[str, str] | None = checkpoint.metadata()
        self.mode_note = self.metadata.get("mode_reason", "")

    def total(self) -> int:
        return 0

    def windows(self, work, begin=None) -> Iterator[Window]:
        return iter(())

    def empty(self) -> tuple[pa.Table | None, dict[str, str]]:
        return None, self.metadata or {}

    def closing(self) -> Closing:
        if not self.cfg.score_cache:
            return Closing()
        figures = Figures.of(self.metadata or {})
        return Closing(figures.metadata(), cache_said(figures.hits, figures.misses, self.checkpoint.rows_done))


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
) -> Closing:
    """Windows into the sink, opened with the first window's metadata; closed at the end (the
    output appears, with what the run knows then: `Closing`, and the ranking metrics of
    `ranked`'s labels field in its metadata), aborted on failure."""
    sink: Sink | None = None
    ranking, labels_field = ranked

    def opened(metadata: dict[str, str]) -> Sink:
        if checkpoint is not None:
            checkpoint.same_choices(metadata)
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
        if checkpoint is not None:
            checkpoint.ended()  # a --resume from here on finds every row kept
        if sink is None:
            table, metadata = scoring.empty()
            sink = opened(metadata)
            if table is not None:
                sink.write(table)
        closing = scoring.closing()
        sink.close(ranking.metadata() | closing.metadata)
    except BaseException as exc:
        if sink is not None:
            sink.abort()
            if isinstance(exc, KeyboardInterrupt) and getattr(sink, "committed", False):  # just after the rename
                raise Interrupted(f"interrupted after {target.out} was written whole") from exc
            if isinstance(exc, KeyboardInterrupt) and sink.streamed:  # not "no output written"
                where = "standard output" if target.kind == "stdout" else target.out
                raise Interrupted(f"interrupted: {where} got the first {sink.streamed:,} rows at most") from exc
        raise
    tracker.counts.nan = sink.nulled.get("score", 0)
    return closing
