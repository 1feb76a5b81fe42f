"""One `scorecli score` run: rows from files, through the Scorer, into an atomic sink,
with rich progress on stderr and a one-line summary. Knows nothing about flags."""

from __future__ import annotations

import time
from typing import BinaryIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from scorecli.config import ScoreConfig
from scorecli.io.readers import iter_rows
from scorecli.io.writers import Sink


def run_score(
    cfg: ScoreConfig, paths: list[str], out: str, total_rows: int | None, console: Console | None, stdin: BinaryIO
) -> None:
    """Score `paths` into `out`; progress and summary go to `console` (None: silent)."""
    from transformers.utils import logging as hf_logging

    from scorecli.scorer import Scorer, score_stream

    # our own progress is the only one: transformers' "Loading weights" bar would break
    # --quiet and the one-line error contract
    hf_logging.disable_progress_bar()
    start = time.perf_counter()
    scorer = Scorer(cfg.model, cfg)
    counts = {"rows": 0, "items": 0, "tokens": 0}
    with Sink(out, scorer.metadata) as sink, _progress(console, total_rows) as progress:
        task = progress.add_task("scoring", total=total_rows, items=0, tps=0.0)
        scoring_start = time.perf_counter()

        def on_batch(items: int, tokens: int) -> None:
            counts["items"] += items
            counts["tokens"] += tokens
            tps = counts["tokens"] / max(time.perf_counter() - scoring_start, 1e-9)
            progress.update(task, items=counts["items"], tps=tps)

        wrote = False
        for prepared, table in score_stream(scorer, iter_rows(paths, stdin=stdin), on_batch):
            sink.write(table)
            wrote = True
            counts["rows"] += prepared.num_rows
            progress.update(task, advance=prepared.num_rows)
        if not wrote:
            sink.write(scorer.empty_table())
    if console is not None:
        _summary(console, counts, time.perf_counter() - start, out, scorer.metadata.get("mode_reason", ""))


def _progress(console: Console | None, total: int | None) -> Progress:
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
    return Progress(*columns, console=console or Console(quiet=True), disable=console is None, transient=True)


def _summary(console: Console, counts: dict[str, int], seconds: float, out: str, note: str = "") -> None:
    """The one-line summary; `note`: how the run's mode was chosen, when it was not the default."""
    items_s = counts["items"] / seconds if seconds > 0 else 0.0
    console.print(
        f"scored {counts['rows']:,} rows, {counts['items']:,} items, {counts['tokens']:,} tokens "
        f"in {seconds:.1f} s ({items_s:,.1f} items/s) -> {out}" + (f" ({note})" if note else ""),
        markup=False,
        soft_wrap=True,
    )
