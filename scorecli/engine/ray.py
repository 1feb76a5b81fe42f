"""Distributed scoring on Ray Data: `RayEngine`, the lifecycle's engine on Ray workers
(`engine.lifecycle.run_job` does the rest), and `run_score_ray`, the `--engine ray` counterpart
of `engine.run.run_score`. Ray is imported only inside functions, so this module imports without
it. Worker code lives in `engine.ray_workers`. Knows nothing about flags or tokenizers.

How a run keeps input order and the local engine's error contract:
- Blocks are the job's windows (`--window-rows` rows, fewer for a small input, a resumed job's
  own), each row tagged with its global `__row_index`, so that a block is a part.
- Inputs on this machine are read by the driver with scorecli's own streaming reader (same rows,
  `file:LINE` / `file: row N` locations and per-row errors as the local engine) and staged in
  Ray's object store; they need to exist only here. Inputs in a store are read by the workers
  themselves: the driver sends each block only where its rows lie (files, rows to skip, and
  marks to seek to, indexed by worker tasks), so no input byte goes through it but the first
  rows and footers it checks.
- Workers score blocks in any order; the driver re-sequences them by `__row_index` and hands
  them to the sink in input order. When the job's parts live under a store's prefix, each
  worker writes its block's part there itself and the driver only journals it, in order.
- Workers always score with `skip_bad_rows` and report failures as data; the driver raises the
  first bad row in input order (the local engine's `InputError` line), so which error is
  reported does not depend on which worker finished first.
Ray's JSON reader is not used: it infers a schema per block and fails a whole block on one
malformed line, so bad rows could not be located or skipped.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import replace
from itertools import islice

import pyarrow as pa

from scorecli.cache.reuse import Figures
from scorecli.cache.store import CacheStore
from scorecli.config import ScoreConfig
from scorecli.core.rows import Fields, parse_row
from scorecli.engine.checkpoint import Checkpoint
from scorecli.engine.job import pinned_runtime
from scorecli.engine.lifecycle import Closing, Window, run_job
from scorecli.engine.progress import Counts, cache_said
from scorecli.engine.ray_cluster import connected, plan_workers, quiet_ray_data
from scorecli.engine.ray_workers import (
    FAILED,
    FAILED_TYPE,
    FIGURES,
    METADATA,
    PART,
    RANGE,
    ROW_INDEX,
    WRITTEN,
    EnginePredictor,
    ScorecliPredictor,
    empty_output,
    encode,
    index_input,
    public,
    raise_failure,
    runtime_choice,
)
from scorecli.engine.run import open_rows
from scorecli.engine.windows import Schedule
from scorecli.errors import InputError, ScorecliError, UsageError, first_line
from scorecli.io.ids import IdCheck, schema_id_type
from scorecli.io.output import Target, resolve_output
from scorecli.io.parts import Part
from scorecli.io.readers import STDIN, RawRow, count_rows, iter_rows
from scorecli.io.schema import with_metadata
from scorecli.io.urls import is_url

__all__ = ["ROW_INDEX", "RayEngine", "ScorecliPredictor", "import_ray", "run_score_ray"]
INSTALL_HINT = "pip install 'scorecli[ray]'"
_BLOCKS_PER_WORKER = 4  # small inputs are cut finer so every worker gets work


def import_ray():
    """The `ray` module with Ray Data loaded, or a UsageError saying how to install it."""
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise UsageError(f"--engine ray needs Ray Data: {INSTALL_HINT}") from exc
    return ray


# ---- the driver -------------------------------------------------------------------------


class RayEngine:
    """`engine.lifecycle.Engine` on Ray workers (join `address` or start a local instance)."""

    def __init__(self, paths: list[str], address: str | None, num_workers: int | None, checkpoint: Checkpoint | None):
        self.paths, self.address, self.num_workers, self.checkpoint = paths, address, num_workers, checkpoint

    @contextmanager
    def start(self, cfg: ScoreConfig, blocks) -> Iterator[_RayScoring]:
        if STDIN in self.paths:
            raise UsageError("--engine ray reads files, not stdin: write the input to a file first")
        ray = import_ray()
        with connected(ray, self.address, self.num_workers), quiet_ray_data(ray):
            yield _RayScoring(ray, cfg, self.paths, self.num_workers, self.checkpoint, blocks)


class _RayScoring:
    def __init__(
        self, ray, cfg: ScoreConfig, paths: list[str], num_workers: int | None, checkpoint: Checkpoint | None, blocks
    ) -> None:
        self.ray, self.cfg, self.paths, self.checkpoint = ray, cfg, paths, checkpoint
        self.mode_note = ""
        self.metadata: dict[str, str] | None = None  # the workers' Scorers say it with their first block
        self.ids: tuple | None = None  # the id kind the job's first id fixed, for ranged blocks
        self.done = checkpoint.rows_done if checkpoint else 0
        self.id_type = schema_id_type(paths, cfg.id_field)
        self.workers, self.resources, device = plan_workers(ray, cfg, num_workers)
        self.worker_cfg = replace(cfg, device=device, skip_bad_rows=True)
        ranged = bool(paths) and all(is_url(p) for p in paths)  # in a store: the workers read it
        counts = self._index() if ranged else None
        total = sum(n for n, _ in counts.values()) if counts is not None else count_rows(paths)
        self.blocks: Schedule = blocks(_block_rows(cfg.window_rows, _remaining(total, self.done), self.workers))
        # parts under a store's prefix: each worker writes its own, the driver journals them
        self.folder = checkpoint.store.folder if checkpoint is not None and is_url(checkpoint.store.folder) else None
        if self.folder is not None:
            checkpoint.begin()  # a new job's folder is taken and cleared before any worker writes
        self.refs, self.rows = (
            self._ranges(counts)
            if ranged
            else _stage(ray, self.blocks, cfg, open_rows(cfg, paths, None, checkpoint), self.done)
        )
        used = min(self.workers, max(len(self.refs), 1))
        self.label = f"scoring on {used} Ray worker{'s' * (used > 1)}"
        # what the workers' score cache gave (`ray_workers.FIGURES`), a resumed job's kept rows' included:
        # each part this driver writes holds the job's counts so far, as the local engine's parts do
        self.figures = Figures.of(checkpoint.metadata() if checkpoint is not None and checkpoint.rows_done else {})
        self.profile = ""

    def total(self) -> int:
        return self.rows

    def _index(self) -> dict[str, tuple[int, list]]:
        """Row counts and seek marks of the inputs, read by worker tasks (`ray_workers.index_input`)."""
        task = self.ray.remote(num_cpus=1)(index_input)
        results = self.ray.get([task.remote(p) for p in self.paths])
        for status, first, second in results:
            if status != "ok":
                raise_failure(first, second)
        return {p: (r[1], r[2]) for p, r in zip(self.paths, results)}

    def _ranges(self, counts: dict[str, tuple[int, list]]) -> tuple[list, int]:
        """One ranged block per window (`blocks`) after the kept rows: where its rows lie."""
        self._first_id()
        spans, row = [], 0  # (path, first row, rows, marks) in input order
        for path in self.paths:
            spans.append((path, row, *counts[path]))
            row += counts[path][0]
        refs, first = [], self.done
        while first < row:
            last = min(first + self.blocks.next(), row)
            segments = [
                json.dumps(
                    {"path": p, "skip": max(first - at, 0), "count": min(last, at + n) - max(first, at), "marks": marks}
                )
                for p, at, n, marks in spans
                if at < last and at + n > first
            ]
            refs.append(self.ray.put(self._block(first, segments, len(refs))))
            first = last
        return refs, row - self.done

    def _block(self, first: int, segments: list[str], k: int) -> pa.Table:
        part = (
            None
            if self.folder is None
            else json.dumps({"folder": self.folder, "name": self.checkpoint.store.next_name(k)})
        )
        n = len(segments)
        return pa.table({ROW_INDEX: pa.array([first] * n, pa.int64()), RANGE: segments, PART: [part] * n})

    def _first_id(self) -> None:
        """The id kind the job's first id fixes, for workers that start inside the input: from
        the kept parts of a resumed job, else from the first rows (read here: one block at most)."""
        if self.id_type is not None:
            return
        kept = self.checkpoint.id_type(self.cfg.id_field) if self.checkpoint and self.done else None
        if kept is not None:
            self.ids = (kept, None)
            return
        check = IdCheck(self.cfg.id_field)
        for _ in islice(check(iter_rows(self.paths)), self.cfg.window_rows):
            if check.type is not None:
                break
        self.ids = None if check.type is None else (check.type, check.first)

    def windows(self, work, begin=None) -> Iterator[Window]:
        if not self.rows:
            return
        blocks = self._score_blocks(min(self.workers, len(self.refs)))
        metadata = None
        with closing(blocks):
            for table in _in_order(blocks, self.rows, self.done):
                described = json.loads(table[METADATA][0].as_py())
                figures = json.loads(described.pop(FIGURES, "{}"))
                self.figures.add(Figures(figures.get("hits", 0), figures.get("misses", 0)))
                self.profile = figures.get("profile") or self.profile
                metadata = metadata or described
                self.metadata = described
                if WRITTEN in table.column_names:
                    yield self._written(table, metadata)
                else:
                    table = public(table, self.cfg.skip_bad_rows)
                    if self.cfg.score_cache:
                        table = table.replace_schema_metadata(
                            with_metadata(table.schema, self.figures.metadata()).metadata
                        )
                    yield Window(table.num_rows, metadata, table)

    def _written(self, table: pa.Table, metadata: dict) -> Window:
        w = json.loads(table[WRITTEN][0].as_py())
        part = Part(w["name"], table[ROW_INDEX][0].as_py(), w["rows"], w["bytes"])
        counts = Counts(rows=w["rows"], skipped=w["skipped"], items=w["items"], tokens=w["tokens"])
        return Window(w["rows"], metadata, part=part, counts=counts, nulled=w["nulled"])

    def _score_blocks(self, workers: int) -> Iterator[pa.Table]:
        """Scored blocks as Ray Data returns them (in order, as asked; the caller checks)."""
        if workers > 1:
            self._one_runtime()
        ray, cfg = self.ray, self.worker_cfg
        kwargs = {
            "model": cfg.model,
            "config": cfg,
            "id_type": self.id_type,
            "skip_bad_rows": self.cfg.skip_bad_rows,
            "ids": self.ids,
        }
        with warnings.catch_warnings():  # Ray Data takes actor options only as `ray_remote_args` (deprecated)
            warnings.simplefilter("ignore", DeprecationWarning)
            ds = ray.data.from_arrow_refs(self.refs).map_batches(
                EnginePredictor,
                fn_constructor_kwargs=kwargs,
                batch_size=None,  # one block = one call = one window
                batch_format="pyarrow",
                compute=ray.data.ActorPoolStrategy(size=workers),
                # a lost worker fails the run; restartable actors make Ray log a warning about
                # their arguments on stderr, even under --quiet
                max_restarts=0,
                **self.resources,
            )
        try:
            yield from ds.iter_batches(batch_size=None, batch_format="pyarrow")
        except ray.exceptions.RayError as exc:
            raise ScorecliError(f"Ray failed: {first_line(exc)}") from exc

    def _one_runtime(self) -> None:
        """CPU workers under `--runtime auto` each measured torch against ONNX Runtime on a cold
        cache, at once on shared cores, and could choose differently (onnx:86:torch and
        onnx:96:torch) while the output named the first block's: one worker chooses first, and
        every worker runs its choice (as a resumed job runs its kept rows')."""
        cfg = self.worker_cfg
        if cfg.runtime != "auto" or cfg.runtime_route is not None or cfg.device != "cpu":
            return
        task = self.ray.remote(**self.resources)(runtime_choice)
        status, first, second = self.ray.get(task.remote(cfg))
        if status != "ok":
            raise_failure(first, second)
        if first is not None:  # None: the score cache holds the settings, as they were resolved
            self.worker_cfg = pinned_runtime(cfg, first)

    def empty(self) -> tuple[pa.Table | None, dict[str, str]]:
        """No rows to score: one worker builds the Scorer for the output's columns and metadata."""
        if self.done:
            return None, self.checkpoint.metadata()
        task = self.ray.remote(**self.resources)(empty_output)
        status, first, second = self.ray.get(task.remote(self.worker_cfg, self.id_type))
        if status != "ok":
            raise_failure(first, second)
        return public(first, self.cfg.skip_bad_rows), second

    def closing(self) -> Closing:
        """The score cache's counts over every worker; its segments (one per block) compacted."""
        if not self.cfg.score_cache:
            return Closing()
        if self.profile:
            CacheStore(self.cfg.score_cache, create=True).tidy(self.profile, [])
        figures = self.figures.metadata()
        said = cache_said(self.figures.hits, self.figures.misses, self.done)
        return Closing(self.metadata | figures if self.metadata else figures, said)


def run_score_ray(
    cfg: ScoreConfig,
    paths: list[str],
    out: str | Target,
    *,
    address: str | None,
    num_workers: int | None,
    console,
    checkpoint: Checkpoint | None = None,
    started: float | None = None,
) -> None:
    """Score `paths` into `out` on Ray workers; same output, order and errors as `run_score`.

    Args:
        cfg: the run's configuration; `device` auto/cuda uses one GPU per worker when the
            cluster has GPUs (each worker sees its GPU as `cuda`), `cpu` never does.
        paths: input files or store URLs as `resolve_inputs` gives them; `-` (stdin) is a UsageError.
        out: output path or URL (Parquet, JSONL, a dataset folder, or `-`) or its `Target`.
        address: a Ray cluster to join (`auto`, `host:6379`, `ray://...`); None starts a local
            instance and shuts it down at the end. An already-connected process is reused.
        num_workers: scoring actors; None: one per GPU in the cluster, else one.
        console: progress and the summary line (None: silent).
        checkpoint: as for `run_score`: blocks are kept as parts (a block is a part), and the
            rows an earlier run of the job kept are not read again.
    """
    if STDIN in paths:
        raise UsageError("--engine ray reads files, not stdin: write the input to a file first")
    if cfg.group_by is not None:  # workers read ranges of records, which may cut a group
        raise UsageError("--group-by needs --engine local: Ray workers read ranges of records, not of groups")
    target = out if isinstance(out, Target) else resolve_output(out, paths)
    run_job(cfg, target, checkpoint, RayEngine(paths, address, num_workers, checkpoint), console, started)


def _remaining(total: int | None, done: int) -> int | None:
    return None if total is None else max(total - done, 0)


def _block_rows(window_rows: int, total: int | None, workers: int) -> int:
    """Rows per block: a window, or fewer when the input is too small to keep every worker busy."""
    if not total:
        return window_rows
    return max(1, min(window_rows, math.ceil(total / (workers * _BLOCKS_PER_WORKER))))


def _stage(ray, blocks: Schedule, cfg: ScoreConfig, rows: Iterator[RawRow], done: int = 0) -> tuple[list, int]:
    """Read the inputs' `rows` (`run.open_rows`: those after the `done` rows a resumed job kept)
    into the object store, one block per window of `blocks`, numbered from `done`.

    Without --skip-bad-rows, rows that fail the reader or the field checks stop the run here,
    before any worker starts, with the local engine's message.
    """
    fields = Fields.of(cfg)
    refs, total = [], 0
    while window := list(islice(rows, blocks.next())):
        if not cfg.skip_bad_rows:
            for raw in window:
                if raw.error is not None:
                    raise InputError(f"{raw.where}: {raw.error}")
                parse_row(raw.data, raw.where, fields)
        refs.append(ray.put(encode(window, done + total)))
        total += len(window)
    return refs, total


def _in_order(blocks: Iterable[pa.Table], total: int, done: int = 0) -> Iterator[pa.Table]:
    """Yield blocks in `__row_index` order (from `done`), each row exactly once; re-raise worker
    failures. A written part comes back as one row: its rows are counted from its description."""
    pending: dict[int, tuple[pa.Table, int]] = {}
    expected = done
    for table in blocks:
        if FAILED in table.column_names:
            raise_failure(table[FAILED_TYPE][0].as_py(), table[FAILED][0].as_py())
        if table.num_rows == 0:
            continue
        index = table[ROW_INDEX]
        first = index[0].as_py()
        written = WRITTEN in table.column_names
        rows = json.loads(table[WRITTEN][0].as_py())["rows"] if written else table.num_rows
        if (not written and index[-1].as_py() - first + 1 != rows) or first in pending:
            raise RuntimeError(f"Ray returned rows {first}..{index[-1].as_py()} out of shape ({table.num_rows} rows)")
        pending[first] = (table, rows)
        while expected in pending:
            table, rows = pending.pop(expected)
            expected += rows
            yield table
    if expected != done + total or pending:
        raise RuntimeError(f"Ray returned {expected - done} of {total} rows in order")
