"""What runs on Ray workers: one Scorer per actor, fed one block per call (docs/clusters.md).

A block is one window of the job (`--window-rows` rows, or fewer for a small input), in one of
two shapes the driver (`engine.ray`) chooses:
- staged: the rows as the driver's reader produced them (inputs on the driver's disk);
- ranged: where the rows lie (segments of input files in a store, `io.readers.iter_range`), so
  the worker reads them itself, straight from the store.
The worker returns the scored rows to the driver, or (parts kept under a store's prefix) writes
the block's part straight into the store and returns one row that describes it. Failures come
back as data: raising inside a Ray Data actor loses the exception's type and retries model
loading. Ray is never imported here. Knows nothing about flags or the command line.
"""

from __future__ import annotations

import json
import pickle
from itertools import chain
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from scorecli.cache import reusing
from scorecli.cache.reuse import settings_recorded
from scorecli.config import ScoreConfig
from scorecli.errors import InputError, ScorecliError, UsageError, first_line
from scorecli.io.folders import folder_at
from scorecli.io.ids import IdCheck, with_id_column
from scorecli.io.parquet_input import table_rows
from scorecli.io.parts import write_part
from scorecli.io.readers import RawRow, index_file, iter_range
from scorecli.io.schema import null_nonfinite
from scorecli.model.default_model import config_for

ROW_INDEX = "__row_index"
# engine-internal columns: rows as the reader produced them, and failures and metadata back
_ROW, _WHERE, _ERROR = "__scorecli_row", "__scorecli_where", "__scorecli_error"
FAILED, FAILED_TYPE, METADATA = "__scorecli_failed", "__scorecli_failed_type", "__scorecli_metadata"
# a ranged block: one row per segment of an input file; the part the worker writes, if any
RANGE, PART = "__scorecli_range", "__scorecli_part"
# a written part, described back: its name, rows, bytes and what the driver counts
WRITTEN = "__scorecli_written"
# in a block's metadata: the pairs the score cache gave and those it did not (`cache.reuse.Figures`)
FIGURES = "__scorecli_figures"


class ScorecliPredictor:
    """Callable class for `Dataset.map_batches(..., batch_format="pyarrow")`: one Scorer per actor.

    Args:
        model: a model folder, .gguf file, Hub id (readable on every worker node) or a bundled
            model's short name (`minilm`), resolved on the worker as `Scorer(model)` resolves it.
        **flags: `ScoreConfig` fields (`template=`, `label_tokens=`, `skip_bad_rows=`, ...),
            or `config=` a whole `ScoreConfig`.

    A `__row_index` column, if the batch has one, is carried to the output unchanged (and
    names rows in error messages), so results can be put back in order after the map.
    """

    def __init__(self, model: str, id_type: pa.DataType | None = None, **flags: Any):
        from scorecli.scorer import Scorer

        # a short name resolved as the library resolves it; the run's score cache is read and added to here
        cfg = flags.pop("config", None)
        if cfg is not None and flags:  # as `Scorer(config=..., top_k=1)`: not dropped without a word
            raise TypeError(f"ScorecliPredictor: keyword flags ({', '.join(flags)}) with config=: put them in it")
        cfg = cfg or config_for(model, flags, applied=("score_cache",))[0]
        # pairs already scored are reused (the run's --score-cache, read and added to here too)
        self.scorer = reusing(cfg, lambda: Scorer(model, cfg))
        self.scorer.id_type = id_type

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Score a batch of input rows; returns the Scorer's output columns (+ `__row_index`)."""
        table = _as_table(batch)
        index = table.column(ROW_INDEX) if ROW_INDEX in table.column_names else None
        if index is not None:
            table = table.drop_columns([ROW_INDEX])
        rows, id_type = table_rows(table, self.scorer.fields.id, None if index is None else index.to_pylist())
        out = self.scorer.score_rows(rows, id_type)
        return out if index is None else out.add_column(0, ROW_INDEX, index)


class EnginePredictor(ScorecliPredictor):
    """`--engine ray`'s worker: a staged or ranged block in; its scored rows, or the part it
    wrote, out. `skip_bad_rows`: the user's choice (the Scorer always skips, so that a bad row
    comes back as data); `ids`: the id kind the job's first id fixed (`IdCheck.fixed`)."""

    def __init__(
        self,
        model: str,
        id_type: pa.DataType | None = None,
        skip_bad_rows: bool = False,
        ids: tuple | None = None,
        **flags: Any,
    ):
        self.failure: Exception | None = None
        self.skip_bad_rows, self.id_type, self.ids = skip_bad_rows, id_type, ids
        try:
            super().__init__(model, id_type, **flags)
        except Exception as exc:  # noqa: BLE001 - reported with the first batch, as the driver's error
            self.failure = exc

    def __call__(self, batch: pa.Table) -> pa.Table:
        index = batch.column(ROW_INDEX)
        try:
            if self.failure is not None:
                raise self.failure
            ranged = RANGE in batch.column_names
            before = (self.scorer.figures.hits, self.scorer.figures.misses)
            out = self.scorer.score_rows(self._read(batch) if ranged else _decode(batch))
            first = index[0].as_py()
            index = pa.array(range(first, first + out.num_rows), pa.int64()) if ranged else index
            # what the block reused, for the driver's totals (`FIGURES`: never in the output's metadata)
            figures = {"hits": self.scorer.figures.hits - before[0], "misses": self.scorer.figures.misses - before[1]}
            figures["profile"] = getattr(self.scorer, "profile", "")
            described = self.scorer.metadata | {FIGURES: json.dumps(figures)}
            metadata = pa.array(_first_only(json.dumps(described), out.num_rows), pa.string())
            out = out.add_column(0, ROW_INDEX, index).append_column(METADATA, metadata)
            if PART in batch.column_names and batch[PART][0].as_py():
                return self._write(out, json.loads(batch[PART][0].as_py()))
            return out
        except Exception as exc:  # noqa: BLE001 - any failure goes back to the driver as a table
            return failure_table(index.slice(0, 1) if RANGE in batch.column_names else index, exc)

    def _read(self, batch: pa.Table) -> list[RawRow]:
        """A ranged block's rows, read from the store here, ids checked as in input order."""
        check = IdCheck(self.scorer.fields.id, self.id_type)
        if self.ids is not None:
            check.fixed(*self.ids)
        segments = [json.loads(s) for s in batch[RANGE].to_pylist()]
        rows = chain.from_iterable(iter_range(s["path"], s["skip"], s["count"], s["marks"]) for s in segments)
        return list(check(rows))

    def _write(self, out: pa.Table, part: dict) -> pa.Table:
        """Keep the block as the part `part["name"]` under the store prefix `part["folder"]`, as
        `Checkpoint.write` keeps a window; one row back describes it."""
        table = public(out, self.skip_bad_rows)
        table, nulled = null_nonfinite(table, scalars=False)
        size = folder_at(part["folder"]).write(part["name"], lambda f: write_part(f, table, "parquet"))
        skipped = len(table) - table["error"].null_count if "error" in table.column_names else 0
        items = pc.sum(pc.list_value_length(table["score"])).as_py() or 0
        written = {
            "name": part["name"],
            "rows": table.num_rows,
            "bytes": size,
            "nulled": nulled,
            "skipped": skipped,
            "items": items,
            "tokens": pc.sum(table["num_tokens"]).as_py() or 0,
        }
        return pa.table(
            {ROW_INDEX: out[ROW_INDEX].slice(0, 1), METADATA: out[METADATA].slice(0, 1), WRITTEN: [json.dumps(written)]}
        )


def public(table: pa.Table, skip_bad_rows: bool) -> pa.Table:
    """The local engine's columns: drop the engine's own, and `error` unless it was asked for;
    without `skip_bad_rows` a bad row is the InputError the local engine raises."""
    if not skip_bad_rows and "error" in table.column_names:
        errors = table["error"]
        if errors.null_count < len(errors):
            raise InputError(next(e for e in errors.to_pylist() if e is not None))
    drop = [ROW_INDEX, METADATA] + ([] if skip_bad_rows else ["error"])
    return table.drop_columns([c for c in drop if c in table.column_names])


def failure_table(index: pa.ChunkedArray | pa.Array, exc: Exception) -> pa.Table:
    n = len(index)
    return pa.table(
        {
            ROW_INDEX: index,
            FAILED_TYPE: pa.array(_first_only(type(exc).__name__, n), pa.string()),
            FAILED: pa.array(_first_only(first_line(exc), n), pa.string()),
        }
    )


def empty_output(config: ScoreConfig, id_type: pa.DataType | None) -> tuple[str, Any, Any]:
    """Remote task for a run with no rows: ("ok", empty table, metadata) or ("failed", type, message)."""
    try:
        from scorecli.scorer import Scorer

        scorer = Scorer(config.model, config)
        scorer.id_type = id_type
        return "ok", with_id_column(scorer.empty_table(), config.id_field, id_type), scorer.metadata
    except Exception as exc:  # noqa: BLE001 - any failure goes back to the driver, which raises it
        return "failed", type(exc).__name__, first_line(exc)


def runtime_choice(config: ScoreConfig) -> tuple[str, Any, Any]:
    """Remote task: ("ok", the metadata of a Scorer built as a worker builds it, None), whose
    `--runtime auto` choice every worker then runs; ("ok", None, None) where the score cache
    holds the run's settings (workers load no model for its hits, as a local run loads none);
    or ("failed", type, message)."""
    try:
        from scorecli.scorer import Scorer

        if settings_recorded(config):
            return "ok", None, None
        return "ok", Scorer(config.model, config).metadata, None
    except Exception as exc:  # noqa: BLE001 - any failure goes back to the driver, which raises it
        return "failed", type(exc).__name__, first_line(exc)


def index_input(path: str) -> tuple[str, Any, Any]:
    """Remote task: ("ok", rows, marks) of an input file in a store (`io.readers.index_file`),
    read on a worker, not the driver; or ("failed", type, message)."""
    try:
        rows, marks = index_file(path)
        return "ok", rows, marks
    except Exception as exc:  # noqa: BLE001 - any failure goes back to the driver, which raises it
        return "failed", type(exc).__name__, first_line(exc)


def encode(rows: list[RawRow], first: int) -> pa.Table:
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
    """`encode` undone on a worker (the engine's own blocks only: never a user's table)."""
    columns = (batch.column(c).to_pylist() for c in (_ROW, _WHERE, _ERROR))
    return [RawRow(pickle.loads(data), where, error) for data, where, error in zip(*columns)]


def _as_table(batch: Any) -> pa.Table:
    if isinstance(batch, pa.Table):
        return batch
    if type(batch).__name__ == "DataFrame":  # batch_format="pandas"
        return pa.Table.from_pandas(batch, preserve_index=False)
    raise TypeError(f"ScorecliPredictor takes pyarrow batches (batch_format='pyarrow'), got {type(batch).__name__}")


def _first_only(value: str, n: int) -> list[str | None]:
    """A column of n values that says `value` once (the driver reads the first row only)."""
    return ([value] + [None] * (n - 1))[:n]


def raise_failure(type_name: str, message: str) -> None:
    known = {cls.__name__: cls for cls in (UsageError, InputError)}
    if type_name in known:
        raise known[type_name](message)
    raise ScorecliError(f"{type_name} on a Ray worker: {message}")
