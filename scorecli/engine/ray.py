"""Distributed scoring on Ray Data: the same `Scorer` on many workers, one ordered output.

`ScorecliPredictor` is the callable class for `ray.data.Dataset.map_batches`; `run_score_ray`
is the `--engine ray` counterpart of `scorecli.engine.run.run_score`. Ray is imported only inside
functions, so this module imports without it. Knows nothing about flags or tokenizers.

How a run keeps input order and the local engine's error contract:
- The driver reads the inputs with scorecli's own streaming reader (the one the local engine
  uses: same rows, same `file:LINE` / `file: row N` locations, same per-row errors) and
  stages them in Ray's object store as one block per window, each row tagged with its
  global `__row_index`. Ray's JSON reader is not used: it infers a schema per block and
  fails a whole block on one malformed line, so bad rows could not be located or skipped.
- Workers score blocks in any order; the driver asks Ray Data to preserve block order and
  re-sequences by `__row_index` anyway, then writes one output through the atomic `Sink`.
- Workers always score with `skip_bad_rows` and report failures as data; the driver raises
  the first bad row in input order (the same `InputError` line the local engine prints),
  so which error is reported does not depend on which worker finished first.
Trade-off: reading is one sequential pass on the driver, and the whole input is staged in
the object store (which spills to disk) before scoring starts; in exchange the rows are
exactly the local engine's, and the inputs need to exist only where the driver runs.
Parsing JSON is orders of magnitude faster than a transformer consumes text, so staging is
a small part of a run. Streaming the read into the scoring would need Ray Data's
experimental row-count repartitioning, and a CPU kept free for its tasks.
"""

from __future__ import annotations

import json
import math
import pickle
import time
import warnings
from contextlib import ExitStack, closing, nullcontext
from dataclasses import replace
from itertools import islice
from typing import Any, Iterable, Iterator

import pyarrow as pa

from scorecli.engine.checkpoint import Checkpoint
from scorecli.config import ScoreConfig
from scorecli.errors import InputError, ScorecliError, UsageError, first_line
from scorecli.io.ids import schema_id_type, with_id_column
from scorecli.io.output import Target, resolve_output
from scorecli.io.readers import STDIN, RawRow, count_rows
from scorecli.engine.progress import Counts, Tracker, note, summary
from scorecli.engine.ray_cluster import connected, plan_workers, quiet_ray_data
from scorecli.engine.run import open_rows

ROW_INDEX = "__row_index"
INSTALL_HINT = "pip install 'scorecli[ray]'"
# engine-internal columns: rows as the reader produced them, and failures and metadata back
_ROW, _WHERE, _ERROR = "__scorecli_row", "__scorecli_where", "__scorecli_error"
_FAILED, _FAILED_TYPE, _METADATA = "__scorecli_failed", "__scorecli_failed_type", "__scorecli_metadata"
_BLOCKS_PER_WORKER = 4  # small inputs are cut finer so every worker gets work


def import_ray():
    """The `ray` module with Ray Data loaded, or a UsageError saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"--engine ray needs Ray Data: {INSTALL_HINT}") from exc
    return ray


# ---- workers ----------------------------------------------------------------------------


class ScorecliPredictor:
    """Callable class for `Dataset.map_batches(..., batch_format="pyarrow")`: one Scorer per actor.

    Args:
        model: a model folder, .gguf file or Hub id (readable on every worker node).
        **flags: `ScoreConfig` fields (`template=`, `label_tokens=`, `skip_bad_rows=`, ...),
            or `config=` a whole `ScoreConfig`.

    A `__row_index` column, if the batch has one, is carried to the output unchanged (and
    names rows in error messages), so results can be put back in order after the map.
    """

    def __init__(self, model: str, id_type: pa.DataType | None = None, **flags: Any):
        from scorecli.scorer import Scorer

        self.scorer = Scorer(model, **flags)
        self.scorer.id_type = id_type

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Score a batch of input rows; returns the Scorer's output columns (+ `__row_index`)."""
        table = _as_table(batch)
        index = table.column(ROW_INDEX) if ROW_INDEX in table.column_names else None
        if index is not None:
            table = table.drop_columns([ROW_INDEX])
        numbers = index.to_pylist() if index is not None else range(table.num_rows)
        rows = [RawRow(data, f"row {k + 1}", typed=True) for k, data in zip(numbers, table.to_pylist())]
        id_field = self.scorer.fields.id
        id_type = table.schema.field(id_field).type if id_field in table.column_names else None
        out = self.scorer.score_rows(rows, id_type)
        return out if index is None else out.add_column(0, ROW_INDEX, index)


class _EnginePredictor(ScorecliPredictor):
    """`run_score_ray`'s worker: takes rows staged by the driver; failures come back as data.

    Raising inside a Ray Data actor loses the exception's type and retries model loading,
    so any failure is returned as a one-row-per-input table that the driver re-raises.
    """

    def __init__(self, model: str, id_type: pa.DataType | None = None, **flags: Any):
        self.failure: Exception | None = None
        try:
            super().__init__(model, id_type, **flags)
        except Exception as exc:  # reported with the first batch, as the driver's error
            self.failure = exc

    def __call__(self, batch: pa.Table) -> pa.Table:
        index = batch.column(ROW_INDEX)
        try:
            if self.failure is not None:
                raise self.failure
            out = self.scorer.score_rows(_decode(batch))
        except Exception as exc:
            return _failure_table(index, exc)
        metadata = pa.array(_first_only(json.dumps(self.scorer.metadata), out.num_rows), pa.string())
        return out.add_column(0, ROW_INDEX, index).append_column(_METADATA, metadata)


def _failure_table(index: pa.ChunkedArray, exc: Exception) -> pa.Table:
    n = len(index)
    return pa.table(
        {
            ROW_INDEX: index,
            _FAILED_TYPE: pa.array(_first_only(type(exc).__name__, n), pa.string()),
            _FAILED: pa.array(_first_only(first_line(exc), n), pa.string()),
        }
    )


def _empty_output(config: ScoreConfig, id_type: pa.DataType | None) -> tuple[str, Any, Any]:
    """Remote task for a run with no rows: ("ok", empty table, metadata) or ("failed", type, message)."""
    try:
        from scorecli.scorer import Scorer

        scorer = Scorer(config.model, config)
        scorer.id_type = id_type
        return "ok", with_id_column(scorer.empty_table(), config.id_field, id_type), scorer.metadata
    except Exception as exc:
        return "failed", type(exc).__name__, first_line(exc)


def _as_table(batch: Any) -> pa.Table:
    if isinstance(batch, pa.Table):
        return batch
    if type(batch).__name__ == "DataFrame":  # batch_format="pandas"
        return pa.Table.from_pandas(batch, preserve_index=False)
    raise TypeError(f"ScorecliPredictor takes pyarrow batches (batch_format='pyarrow'), got {type(batch).__name__}")


def _first_only(value: str, n: int) -> list[str | None]:
    """A column of n values that says `value` once (the driver reads the first row only)."""
    return ([value] + [None] * (n - 1))[:n]


def _one_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def _raise_failure(type_name: str, message: str) -> None:
    known = {cls.__name__: cls for cls in (UsageError, InputError)}
    if type_name in known:
        raise known[type_name](message)
    raise ScorecliError(f"{type_name} on a Ray worker: {message}")


# ---- the driver -------------------------------------------------------------------------


def run_score_ray(
    cfg: ScoreConfig, paths: list[str], out: str | Target, *, address: str | None, num_workers: int | None, console,
    checkpoint: Checkpoint | None = None, started: float | None = None,
) -> None:
    """Score `paths` into `out` on Ray workers; same output, order and errors as `run_score`.

    Args:
        cfg: the run's configuration; `device` auto/cuda uses one GPU per worker when the
            cluster has GPUs (each worker sees its GPU as `cuda`), `cpu` never does.
        paths: input files as `resolve_inputs` gives them; `-` (stdin) is a UsageError.
        out: output path (Parquet, JSONL, or `-`) or its `Target`, written by this process
            as the local engine writes it (`scorecli.io.writers.Sink`).
        address: a Ray cluster to join (`auto`, `host:6379`, `ray://...`); None starts a local
            instance and shuts it down at the end. An already-connected process is reused.
        num_workers: scoring actors; None: one per GPU in the cluster, else one.
        console: progress and the summary line (None: silent).
        checkpoint: as for `run_score`: blocks are kept as parts (a block is a part), and the
            rows an earlier run of the job kept are not read again.
    """
    if STDIN in paths:
        raise UsageError("--engine ray reads files, not stdin: write the input to a file first")
    ray = import_ray()
    start = started if started is not None else time.perf_counter()  # the summary's time counts from here
    target = out if isinstance(out, Target) else resolve_output(out, paths)
    id_type = schema_id_type(paths, cfg.id_field)
    done = checkpoint.rows_done if checkpoint else 0
    with checkpoint.keeping() if checkpoint else nullcontext(), connected(ray, address, num_workers), \
            quiet_ray_data(ray):  # fmt: skip
        workers, resources, device = plan_workers(ray, cfg, num_workers)
        block_rows = _block_rows(cfg.window_rows, _remaining(count_rows(paths), done), workers)
        if checkpoint is not None:  # a resumed job goes on in its own parts (a block is a part)
            block_rows = checkpoint.part_rows(block_rows)
        refs, total = _stage(ray, block_rows, cfg, open_rows(cfg, paths, None, checkpoint))
        worker_cfg = replace(checkpoint.same_runtime(cfg) if checkpoint else cfg, device=device, skip_bad_rows=True)
        if total == 0 and done:
            counts = Counts()
            checkpoint.finish(checkpoint.metadata())
        elif total == 0:
            counts = _write_empty(ray, worker_cfg, resources, checkpoint or target, cfg, id_type, console)
        else:
            workers = min(workers, len(refs))
            blocks = _score_blocks(ray, refs, worker_cfg, workers, resources, id_type)
            label = f"scoring on {workers} Ray worker{'s' * (workers > 1)}"
            counts = _write_in_order(blocks, checkpoint or target, cfg, (done, total), console, label)
    counts.resumed = done
    if console is not None:
        summary(console, counts, time.perf_counter() - start, target.out)


def _remaining(total: int | None, done: int) -> int | None:
    return None if total is None else max(total - done, 0)


def _block_rows(window_rows: int, total: int | None, workers: int) -> int:
    """Rows per block: a window, or fewer when the input is too small to keep every worker busy."""
    if not total:
        return window_rows
    return max(1, min(window_rows, math.ceil(total / (workers * _BLOCKS_PER_WORKER))))


def _stage(ray, block_rows: int, cfg: ScoreConfig, rows: Iterator[RawRow]) -> tuple[list, int]:
    """Read the inputs' `rows` (`run.open_rows`) into the object store, one block per
    `block_rows` rows.

    Without --skip-bad-rows, rows that fail the reader or the field checks stop the run here,
    before any worker starts, with the local engine's message.
    """
    from scorecli.core.encode import Fields, parse_row

    fields = Fields(cfg.query_field, cfg.items_field, cfg.id_field)
    refs, total = [], 0
    while window := list(islice(rows, block_rows)):
        if not cfg.skip_bad_rows:
            for raw in window:
                if raw.error is not None:
                    raise InputError(f"{raw.where}: {raw.error}")
                parse_row(raw.data, raw.where, fields)
        refs.append(ray.put(_encode(window, total)))
        total += len(window)
    return refs, total


def _encode(rows: list[RawRow], first: int) -> pa.Table:
    """Rows as the reader produced them. Values travel pickled (as Ray ships task arguments),
    so Parquet timestamps, decimals and bytes reach the Scorer unchanged."""
    return pa.table(
        {
            ROW_INDEX: pa.array(range(first, first + len(rows)), pa.int64()),
            _ROW: pa.array([pickle.dumps(r.data, protocol=5) for r in rows], pa.large_binary()),
            _WHERE: pa.array([r.where for r in rows], pa.string()),
            _ERROR: pa.array([r.error for r in rows], pa.string()),
        }
    )


def _decode(batch: pa.Table) -> list[RawRow]:
    """`_encode` undone on a worker (the engine's own blocks only: never a user's table)."""
    columns = (batch.column(c).to_pylist() for c in (_ROW, _WHERE, _ERROR))
    return [RawRow(pickle.loads(data), where, error) for data, where, error in zip(*columns)]


def _score_blocks(ray, refs: list, cfg: ScoreConfig, workers: int, resources: dict, id_type) -> Iterator[pa.Table]:
    """Scored blocks as Ray Data returns them (in order, as asked; the caller checks)."""
    with warnings.catch_warnings():  # Ray Data takes actor options only as `ray_remote_args` (deprecated)
        warnings.simplefilter("ignore", DeprecationWarning)
        ds = ray.data.from_arrow_refs(refs).map_batches(
            _EnginePredictor,
            fn_constructor_kwargs={"model": cfg.model, "config": cfg, "id_type": id_type},
            batch_size=None,  # one block = one call = one window
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=workers),
            # a lost worker fails the run; restartable actors make Ray log a warning about
            # their arguments on stderr, even under --quiet
            max_restarts=0,
            **resources,
        )
    try:
        yield from ds.iter_batches(batch_size=None, batch_format="pyarrow")
    except ray.exceptions.RayError as exc:
        raise ScorecliError(f"Ray failed: {first_line(exc)}") from exc


def _in_order(blocks: Iterable[pa.Table], total: int) -> Iterator[pa.Table]:
    """Yield blocks in `__row_index` order, each row exactly once; re-raise worker failures."""
    pending: dict[int, pa.Table] = {}
    expected = 0
    for table in blocks:
        if _FAILED in table.column_names:
            _raise_failure(table[_FAILED_TYPE][0].as_py(), table[_FAILED][0].as_py())
        if table.num_rows == 0:
            continue
        index = table[ROW_INDEX]
        first, last = index[0].as_py(), index[-1].as_py()
        if last - first + 1 != table.num_rows or first in pending:
            raise RuntimeError(f"Ray returned rows {first}..{last} out of shape ({table.num_rows} rows)")
        pending[first] = table
        while expected in pending:
            table = pending.pop(expected)
            expected += table.num_rows
            yield table
    if expected != total or pending:
        raise RuntimeError(f"Ray returned {expected} of {total} rows in order")


def _write_in_order(blocks: Iterator[pa.Table], out: Target | Checkpoint, cfg: ScoreConfig, rows: tuple[int, int],
                    console, label: str) -> Counts:  # fmt: skip
    """Write scored blocks to one output in input order (a `Checkpoint` keeps each as a part and
    makes the output at the end); stop at the first bad row unless skipping. `rows`: (rows an
    earlier run kept, rows to score now)."""
    from scorecli.checks.drift import stderr_line
    from scorecli.io.writers import Sink

    done, total = rows
    metadata = None
    with closing(blocks), ExitStack() as stack, Tracker(console, done + total, label, done) as tracker:
        sink = out if isinstance(out, Checkpoint) else None
        for table in _in_order(blocks, total):
            if metadata is None:
                metadata = json.loads(table[_METADATA][0].as_py())
                note(console, stderr_line(metadata))  # approximate scores (onnx-int8) say so, as locally
            if sink is None:
                sink = stack.enter_context(Sink(out, metadata))
            table = _public(table, cfg)
            sink.write(table)
            tracker.counts.add_table(table)
            tracker.rows(table.num_rows)
    if isinstance(out, Checkpoint):
        out.finish(metadata)
    tracker.counts.nan = sink.nulled.get("score", 0) if sink is not None else 0
    return tracker.counts


def _public(table: pa.Table, cfg: ScoreConfig) -> pa.Table:
    """The local engine's columns: drop the engine's own, and `error` unless it was asked for."""
    if not cfg.skip_bad_rows and "error" in table.column_names:
        errors = table["error"]
        if errors.null_count < len(errors):
            raise InputError(next(e for e in errors.to_pylist() if e is not None))
    drop = [ROW_INDEX, _METADATA] + ([] if cfg.skip_bad_rows else ["error"])
    return table.drop_columns([c for c in drop if c in table.column_names])


def _write_empty(ray, worker_cfg: ScoreConfig, resources: dict, out: Target | Checkpoint, cfg: ScoreConfig,
                 id_type, console) -> Counts:  # fmt: skip
    """No input rows: one worker builds the Scorer for the output's columns and metadata."""
    from scorecli.checks.drift import stderr_line
    from scorecli.io.writers import Sink

    status, first, second = ray.get(ray.remote(**resources)(_empty_output).remote(worker_cfg, id_type))
    if status != "ok":
        _raise_failure(first, second)
    note(console, stderr_line(second))
    if isinstance(out, Checkpoint):
        out.write(_public(first, cfg))
        out.finish(second)
    else:
        with Sink(out, second) as sink:
            sink.write(_public(first, cfg))
    return Counts()
