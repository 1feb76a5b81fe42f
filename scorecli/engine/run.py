"""One `scorecli score` run: rows from files, through the Scorer, into the sink, with rich
progress on stderr and a one-line summary. Knows nothing about flags.

`open_rows` is the one way a run reads its input (ids checked in input order, `scorecli.io.ids`);
`preflight` checks what can be checked before the model loads.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import replace
from itertools import chain
from typing import BinaryIO

from rich.console import Console

from scorecli.engine.checkpoint import Checkpoint
from scorecli.config import ScoreConfig
from scorecli.errors import InputError
from scorecli.io.ids import IdCheck, schema_id_type, with_id_column
from scorecli.io.output import Target
from scorecli.io.readers import STDIN, RawRow, iter_rows
from scorecli.io.sources import source_for
from scorecli.io.writers import Sink
from scorecli.engine.progress import Tracker, note, summary


def open_rows(
    cfg: ScoreConfig, paths: list[str], stdin: BinaryIO | None, checkpoint: Checkpoint | None = None
) -> Iterator[RawRow]:
    """The run's rows in input order, ids checked (`IdCheck`); after the rows an earlier run
    of the job kept (`checkpoint`), whose ids count as seen."""
    check = IdCheck(cfg.id_field, schema_id_type(paths, cfg.id_field))
    skip = 0
    if checkpoint is not None and checkpoint.rows_done:
        skip = checkpoint.rows_done
        check.seen(checkpoint.id_type(cfg.id_field), iter_rows(paths))  # generator: read only if needed
    return check(iter_rows(paths, stdin=stdin, skip=skip))


def preflight(cfg: ScoreConfig, paths: list[str], rows: Iterator[RawRow]) -> Iterator[RawRow]:
    """Check the first row of every input before the model loads; returns `rows` unchanged.

    Regular files are opened once more for their first row; a pipe or stdin read first is
    peeked from `rows` (the peeked row is put back). Raises InputError for a bad first row
    unless `cfg.skip_bad_rows`.
    """
    from scorecli.core.encode import Fields, parse_row

    fields = Fields(cfg.query_field, cfg.items_field, cfg.id_field)
    firsts: list[RawRow] = []
    peeked = next(rows, None) if paths and _is_stream(paths[0]) else None
    if peeked is not None:
        firsts.append(peeked)
        rows = chain([peeked], rows)
    for path in paths:
        if not _is_stream(path):
            reader = IdCheck(cfg.id_field, schema_id_type([path], cfg.id_field))(iter_rows([path]))
            firsts.extend(r for r in [next(reader, None)] if r is not None)
            reader.close()
    for raw in firsts if not cfg.skip_bad_rows else ():
        if raw.error is not None:
            raise InputError(f"{raw.where}: {raw.error}")
        parse_row(raw.data, raw.where, fields)
    return rows


def _is_stream(path: str) -> bool:
    return path == STDIN or source_for(path).size(path) is None


def run_score(
    cfg: ScoreConfig, paths: list[str], out: str | Target, total_rows: int | None, console: Console | None,
    stdin: BinaryIO | None, rows: Iterator[RawRow] | None = None, checkpoint: Checkpoint | None = None,
    started: float | None = None,
) -> None:  # fmt: skip
    """Score `paths` into `out`; progress and summary go to `console` (None: silent).

    `rows` (from `open_rows`, maybe through `preflight`) replaces reading `paths` afresh.
    `checkpoint` (`Checkpoint.open`): windows are kept as parts and become `out` at the end;
    the rows it already holds are not read again. None: written straight through a `Sink`.
    `started`: when the command began (`time.perf_counter`), for the summary's start-up time.
    """
    from transformers.utils import logging as hf_logging

    from scorecli.checks.drift import stderr_line
    from scorecli.scorer import Scorer
    from scorecli.engine.local import score_stream

    # our own progress is the only one: transformers' "Loading weights" bar would break
    # --quiet and the one-line error contract
    hf_logging.disable_progress_bar()
    start = started if started is not None else time.perf_counter()  # the summary's time counts from here
    done = checkpoint.rows_done if checkpoint else 0
    if rows is None:
        rows = open_rows(cfg, paths, stdin, checkpoint)
    with checkpoint.keeping() if checkpoint else nullcontext():
        if checkpoint is not None:  # a resumed job goes on as it began: its windows, its runtime
            cfg = replace(checkpoint.same_runtime(cfg), window_rows=checkpoint.part_rows(cfg.window_rows))
        scorer = Scorer(cfg.model, cfg)
        note(console, stderr_line(scorer.metadata))  # approximate scores (onnx-int8) say so
        scorer.id_type = schema_id_type(paths, cfg.id_field)
        with nullcontext(checkpoint) if checkpoint else Sink(out, scorer.metadata) as sink, \
                Tracker(console, total_rows, done=done) as tracker:  # fmt: skip
            counts, wrote = tracker.counts, done > 0
            for prepared, table in score_stream(scorer, rows, tracker.work):
                sink.write(table)
                wrote = True
                counts.add_rows(table)
                tracker.rows(prepared.num_rows)
            if not wrote:
                sink.write(with_id_column(scorer.empty_table(), cfg.id_field, scorer.id_type))
        if checkpoint is not None:
            checkpoint.finish(scorer.metadata)
        counts.nan = sink.nulled.get("score", 0)
    if console is not None:
        summary(console, counts, time.perf_counter() - start, (checkpoint.target if checkpoint else sink).out,
                scorer.metadata.get("mode_reason", ""))
