"""A `scorecli score` run in this process: `LocalEngine`, where the lifecycle's windows are
scored (`lifecycle.run_job` does the rest). Knows nothing about flags.

`open_rows` is the one way a run reads its input (ids checked in input order, `scorecli.io.ids`);
`preflight` checks what can be checked before the model loads.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain
from typing import BinaryIO

import pyarrow as pa
from rich.console import Console

from scorecli.cache import reusing
from scorecli.config import ScoreConfig
from scorecli.core.rows import Fields, parse_row
from scorecli.engine.checkpoint import Checkpoint
from scorecli.engine.lifecycle import Closing, Window, run_job
from scorecli.engine.local import score_stream
from scorecli.engine.progress import cache_said, loading
from scorecli.engine.windows import Schedule
from scorecli.errors import InputError
from scorecli.io.groups import grouped_rows, grouping
from scorecli.io.ids import IdCheck, schema_id_type, with_id_column
from scorecli.io.output import Target, resolve_output
from scorecli.io.readers import STDIN, RawRow, count_rows
from scorecli.io.sources import source_for
from scorecli.model.default_model import short_name


def open_rows(
    cfg: ScoreConfig, paths: list[str], stdin: BinaryIO | None, checkpoint: Checkpoint | None = None
) -> Iterator[RawRow]:
    """The run's rows in input order, ids checked (`IdCheck`); after the rows an earlier run
    of the job kept (`checkpoint`), whose ids count as seen."""
    check = IdCheck(cfg.id_field, schema_id_type(paths, cfg.id_field))
    skip = 0
    if checkpoint is not None and checkpoint.rows_done:
        skip = checkpoint.rows_done
        check.seen(checkpoint.id_type(cfg.id_field), read_rows(cfg, paths))  # generator: read only if needed
    return check(read_rows(cfg, paths, stdin, skip))


def read_rows(cfg: ScoreConfig, paths: list[str], stdin: BinaryIO | None = None, skip: int = 0) -> Iterator[RawRow]:
    """The input's rows after the first `skip`: its records, or with `--group-by` the rows they
    form (`io.groups`)."""
    return grouped_rows(paths, grouping(cfg.group_by, cfg.query_field, cfg.items_field, cfg.labels_field), stdin, skip)


def total_rows(cfg: ScoreConfig, paths: list[str]) -> int | None:
    """The input's rows when cheap to know (`readers.count_rows`); grouped rows are counted by
    reading the records once (None where records are not counted either)."""
    records = count_rows(paths)
    if records is None or cfg.group_by is None:
        return records
    return sum(1 for _ in read_rows(cfg, paths))


def preflight(cfg: ScoreConfig, paths: list[str], rows: Iterator[RawRow]) -> Iterator[RawRow]:
    """Check the first row of every input before the model loads; returns `rows` unchanged.

    Regular files are opened once more for their first row; a pipe or stdin read first is
    peeked from `rows` (the peeked row is put back). Raises InputError for a bad first row
    unless `cfg.skip_bad_rows`.
    """
    fields = Fields.of(cfg)
    firsts: list[RawRow] = []
    peeked = next(rows, None) if paths and _is_stream(paths[0]) else None
    if peeked is not None:
        firsts.append(peeked)
        rows = chain([peeked], rows)
    for path in paths:
        if not _is_stream(path):
            reader = IdCheck(cfg.id_field, schema_id_type([path], cfg.id_field))(read_rows(cfg, [path]))
            firsts.extend(r for r in [next(reader, None)] if r is not None)
            reader.close()
    for raw in firsts if not cfg.skip_bad_rows else ():
        if raw.error is not None:
            raise InputError(f"{raw.where}: {raw.error}")
        parse_row(raw.data, raw.where, fields)
    return rows


def _is_stream(path: str) -> bool:
    return path == STDIN or source_for(path).size(path) is None


class LocalEngine:
    """`engine.lifecycle.Engine` in this process: one Scorer, windows prepared ahead (`local`)."""

    def __init__(
        self,
        paths: list[str],
        stdin: BinaryIO | None,
        rows: Iterator[RawRow] | None,
        checkpoint: Checkpoint | None,
        total_rows: int | None,
        console: Console | None = None,
    ):
        self.paths, self.stdin, self.rows, self.checkpoint = paths, stdin, rows, checkpoint
        self.total_rows, self.console = total_rows, console

    @contextmanager
    def start(self, cfg: ScoreConfig, blocks) -> Iterator[_Local]:
        """`blocks` is for engines that cut windows up front: here a resumed job's windows are its
        checkpoint's `schedule` (growing windows, `engine.windows`)."""
        rows = self.rows if self.rows is not None else open_rows(cfg, self.paths, self.stdin, self.checkpoint)
        windows = self.checkpoint.schedule(cfg) if self.checkpoint else Schedule(cfg.window_rows, cfg.window_seconds)
        with loading(self.console, short_name(cfg.model) or cfg.model):
            # pairs already scored are reused; the model loads when one is not (`scorecli.cache`)
            scorer = reusing(cfg, lambda: load_scorer(cfg))
        scorer.id_type = schema_id_type(self.paths, cfg.id_field)
        if self.checkpoint is not None and self.checkpoint.rows_done:  # pairs as the kept windows left them
            scorer.seed(read_rows(cfg, self.paths), self.checkpoint.store.tables())
            scorer.resumed(self.checkpoint.metadata())
        yield _Local(scorer, rows, self.total_rows, self.checkpoint, windows)


class _Local:
    label = "scoring"

    def __init__(
        self, scorer, rows: Iterator[RawRow], total_rows: int | None, checkpoint: Checkpoint | None, schedule: Schedule
    ):
        self.scorer, self.rows, self.total_rows, self.checkpoint = scorer, rows, total_rows, checkpoint
        self.schedule = schedule
        self.metadata = scorer.metadata
        self.mode_note = self.metadata.get("mode_reason", "")

    def total(self) -> int | None:
        done = self.checkpoint.rows_done if self.checkpoint else 0
        return None if self.total_rows is None else max(self.total_rows - done, 0)

    def windows(self, work, begin=None) -> Iterator[Window]:
        for prepared, table in score_stream(self.scorer, self.rows, work, windows=self.schedule, on_window=begin):
            yield Window(prepared.num_rows, self.scorer.metadata, table, counted=True)

    def empty(self) -> tuple[pa.Table | None, dict[str, str]]:
        if self.checkpoint is not None and self.checkpoint.rows_done:
            return None, self.scorer.metadata
        table = with_id_column(self.scorer.empty_table(), self.scorer.config.id_field, self.scorer.id_type)
        return table, self.scorer.metadata

    def closing(self) -> Closing:
        """This run's segments merged; the cache's counts and the audit's figures for the output."""
        reuse, done = self.scorer, Closing()
        reuse.close()
        if figures := reuse.closing_metadata():
            done.metadata = reuse.metadata | figures
            kept = self.checkpoint.rows_done if self.checkpoint is not None else 0
            done.summary = cache_said(reuse.figures.hits, reuse.figures.misses, kept)
        if reuse.sampler is not None:
            verdict = reuse.audit()
            done.metadata = (done.metadata or reuse.metadata) | verdict.metadata()
            done.lines.append(verdict.line())
            if not verdict.passed:
                beyond = (
                    f"audit: the run's scores differ from the model's own float32 forward by up to "
                    f"{verdict.max_diff:.2g}, beyond the tolerance {verdict.tolerance:.2g}"
                )
                warnings.warn(beyond, RuntimeWarning, stacklevel=2)
                if reuse.config.audit_strict:
                    done.failure = f"{beyond} (--audit-strict; the output was written)"
        return done


def load_scorer(cfg: ScoreConfig):
    """The Scorer of `cfg`, loaded now. torch and transformers are imported here, when a window has
    a pair to score: a job whose pairs are all in the score cache never imports them."""
    from scorecli.scorer import Scorer

    return Scorer(cfg.model, cfg)  # without transformers' loading bar: --quiet means quiet


def run_score(
    cfg: ScoreConfig,
    paths: list[str],
    out: str | Target,
    total_rows: int | None,
    console: Console | None,
    stdin: BinaryIO | None,
    rows: Iterator[RawRow] | None = None,
    checkpoint: Checkpoint | None = None,
    started: float | None = None,
) -> None:
    """Score `paths` into `out` in this process (`lifecycle.run_job`); progress and summary go to
    `console` (None: silent).

    `rows` (from `open_rows`, maybe through `preflight`) replaces reading `paths` afresh.
    `checkpoint` (`Checkpoint.open`): windows are kept as parts and become `out` at the end;
    the rows it already holds are not read again. None: written straight through a sink.
    `started`: when the command began (`time.perf_counter`), for the summary's start-up time.
    """
    target = out if isinstance(out, Target) else resolve_output(out)
    engine = LocalEngine(paths, stdin, rows, checkpoint, total_rows, console)
    run_job(cfg, target, checkpoint, engine, console, started)
