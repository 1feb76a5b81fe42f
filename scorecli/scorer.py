"""The one scoring core: raw rows in, an Arrow table of scores out, in input order.

`Scorer.prepare` does the CPU work of a window (validate, tokenize, pack, plan batches) and
`Scorer.run` the model work (its batches run by `engine.batches`: halved when out of memory, in
CPU streams, results read back once per window; the `auto` fallback, unsort, the output table);
`engine.local.score_stream` overlaps the two across windows. What depends on the model's kind
(encoding, packing, forward, heads, the self-check's reference) is its family's
(`scorecli.kinds`, built from a frozen `Setup`): the Scorer asks the family what it can do and
never which kind it runs. It sits in the engine layer (docs/ARCHITECTURE.md: Layers). Knows
nothing about files or the command line (a library caller's progress line is `engine.progress`'s).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from scorecli.checks.selfcheck import open_routed
from scorecli.checks.startup import start_up_check
from scorecli.config import ScoreConfig
from scorecli.core.pack import Seq, drop_shared, shared_prefix_len
from scorecli.core.ranking import Chunking, aggregate
from scorecli.core.repeats import unique_seqs
from scorecli.core.rows import Fields, Row, parse_row
from scorecli.engine.batches import Readback, free_cache, run_serial, run_streams
from scorecli.engine.prepared import Prepared
from scorecli.engine.progress import tracked
from scorecli.errors import InputError, UsageError, a_kind, error_line
from scorecli.io.columns import Columns, window_table
from scorecli.io.formats import given_rows
from scorecli.io.parquet_input import table_rows
from scorecli.io.readers import RawRow
from scorecli.kinds import Family, Setup, family_class, make_family
from scorecli.kinds.spec import RunSpec, resolve_spec
from scorecli.model.compat import support_of
from scorecli.model.default_model import config_for
from scorecli.model.hub import path_text
from scorecli.model.load import Loaded, load_model
from scorecli.model.quiet import quiet_transformers
from scorecli.runtimes import runtime_info
from scorecli.runtimes.budget import default_batch_tokens
from scorecli.timings import mark
from scorecli.version import __version__

# Shortest prefix shared by every row of a window that is computed once for all of them
# (`attention.shared`); shorter ones stay in every sequence.
MIN_SHARED_TOKENS = 16


class Scorer:
    """Scores rows of one query and many items with a Hugging Face model::

        scorer = Scorer()  # the CLI's model: $SCORECLI_MODEL, else minilm
        table = pa.table({"query": ["capital of France"], "items": [["Paris.", "Bananas."]]})
        print(scorer.score_table(table).to_pylist())

    Args:
        model: a path (a `pathlib.Path` too), Hub id or short name (`minilm`), resolved as
            `scorecli score --model` is (`model.default_model.resolve_model`; None: $SCORECLI_MODEL,
            else the default), or a `Loaded` model.
        config: a configuration whose model is resolved already (the CLI's, Ray workers'); else
            keyword overrides (the CLI's flags: `template="qwen3-reranker"`, `top_k=3`) build one
            (both: a TypeError).
        progress: transformers' loading bar, a Hub note and a progress line on stderr; False
            (the default): print nothing.

    Raises:
        UsageError: one line: a model that cannot be resolved (not installed, no such path, a Hub
            that does not answer) or flags that contradict each other.
    """

    def __init__(
        self,
        model: str | Loaded | None = None,
        config: ScoreConfig | None = None,
        *,
        progress: bool = False,
        **overrides: Any,
    ):
        mark("imports")
        self.progress = progress
        library = config is None  # a library caller: the model as the CLI resolves it, nothing printed
        if config is None:
            config, note = config_for(model, overrides)
            if note and progress:
                print(f"note: {note}", file=sys.stderr)
        elif overrides:  # not applied over a whole configuration, nor dropped without a word
            raise TypeError(
                f"Scorer: keyword flags ({', '.join(overrides)}) with config=: put them in the configuration "
                "(dataclasses.replace(config, ...))"
            )
        self.config = config
        # a command (a config given) shows its own progress only; a library caller's stderr stays theirs
        with quiet_transformers(bar=not (library and progress), advice=library and not progress):
            self.loaded = model if isinstance(model, Loaded) else load_model(self.config)
        cfg, loaded = self.config, self.loaded
        mark("model loaded")
        self.template = family_class(loaded.kind).template(loaded.kind, cfg, loaded)
        self.support = support_of(loaded)  # decoders: refuses what no mode reproduces
        self.spec: RunSpec = resolve_spec(cfg, loaded, self.template, self.support)
        self.fields = Fields.of(cfg)
        self.id_type: pa.DataType | None = None  # set by callers whose input has a schema (Parquet)
        self.max_batch_tokens = cfg.max_batch_tokens or default_batch_tokens(loaded.config, loaded.device, loaded.dtype)
        self.chunking = Chunking(cfg.chunk_tokens, cfg.chunk_overlap, cfg.chunk_aggregate) if cfg.chunk_tokens else None
        setup = Setup(cfg, loaded, self.spec, self.support, self.template, self.chunking)
        self.family: Family = make_family(setup)  # everything that depends on the kind
        if cfg.compile == "on" and getattr(self.family, "compiled", None) is None:
            raise UsageError(
                f"--compile on: scorecli compiles decoder models' layers; this is {a_kind(self.spec.kind)} model"
            )
        self.streams = self.family.streams  # concurrent forwards on CPU (`_run_streams`)
        self.fallback = self.family.fallback  # backend to switch to if the one `auto` chose fails
        self.self_check_error: float | None = None
        self.drift = None  # `drift.Drift` of an approximate runtime (onnx-int8), measured by the self-check
        mark("scorer built")
        self.self_check_note = start_up_check(self)  # recorded in the metadata
        mark("self-checked")
        if loaded.memory is not None and any(runtime_info(r).needs == "onnxruntime" for r in self.runtime.split("+")):
            # what this run read of the torch model: the next run of it need not build it, unless a batch
            # goes to torch (`model.remembered`, `runtimes.route.Pending`)
            loaded.memory.save()

    @property
    def hidden_pooling(self) -> str | None:
        """Where pooled hidden states are read (None: not asked); the family's."""
        return self.family.pooling

    @hidden_pooling.setter
    def hidden_pooling(self, pooling: str | None) -> None:
        self.family.pooling = pooling

    @property
    def forward(self):
        return self.family.forward

    @property
    def runtime(self) -> str:
        """What runs the forward: torch, onnx or onnx-int8 (`runtime_onnx.choose`), or two of them
        by sequence length (`onnx+torch`: `runtimes.route`)."""
        return getattr(self.family, "runtime", "torch")

    @property
    def backend_name(self) -> str:
        return self.family.backend_name

    @property
    def shares_prefix(self) -> bool:
        return self.family.shares_prefix

    # ---- CPU stages -------------------------------------------------------------------

    def prepare(self, rows: list[RawRow], id_type: pa.DataType | None = None) -> Prepared:
        """Validate, encode and pack a window of rows; plan its batches.

        `id_type` (else `self.id_type`, else inferred) is the id column's type."""
        parsed: list[Row | None] = []
        errors: list[str | None] = []
        for raw in rows:
            row, err = self._parse(raw)
            parsed.append(row)
            errors.append(err)
        return self.prepare_parsed(rows, parsed, errors, id_type)

    def prepare_parsed(
        self, rows: list[RawRow], parsed: list[Row | None], errors: list[str | None], id_type: pa.DataType | None = None
    ) -> Prepared:
        """`prepare` of rows validated already (`parsed[k]` None: row k failed with `errors[k]`);
        `rows` give the ids and where each row is."""
        errors = list(errors)
        good = [k for k, r in enumerate(parsed) if r is not None]
        encoded = self.family.encoder.encode([parsed[k] for k in good], [rows[k].where for k in good], self.chunking)
        counts = np.zeros(len(rows), dtype=np.int64)
        per_row: dict[int, list[Seq]] = {}
        chunks: list[np.ndarray] = []
        prefixes: list[np.ndarray] = []
        first = 0
        for k, enc in zip(good, encoded):
            try:
                if enc.error:
                    raise InputError(enc.error)
                seqs, row_chunks = self.family.pack(enc, rows[k].where, first, self.chunking)
            except InputError as exc:
                self._fail(exc)
                parsed[k], errors[k] = None, str(exc)
                continue
            per_row[k] = seqs
            if self.shares_prefix:
                prefixes.append(self.family.prefix(enc))
            counts[k] = len(row_chunks)
            first += sum(len(s.item_index) for s in seqs)  # entries: chunks of items (and an embedded query)
            chunks.append(row_chunks)
        seqs = [s for k in sorted(per_row) for s in per_row[k]]
        seq_rows = np.array([k for k in sorted(per_row) for _ in per_row[k]], dtype=np.int64)
        # a text or pair listed again is run once (docs/long-jobs.md: Nightly jobs), where an entry's
        # result is its sequence's alone (not where items meet their query on the device: `apart`)
        keep, copies = unique_seqs(seqs) if self.family.entries_alone else (list(range(len(seqs))), None)
        if copies is not None:
            seqs, seq_rows = [seqs[i] for i in keep], seq_rows[keep]
        lengths = np.array([s.length for s in seqs], dtype=np.int64)
        num_tokens = np.bincount(seq_rows, weights=lengths, minlength=len(rows)).astype(np.int64)
        shared = self._shared_prefix(prefixes)
        if len(shared):
            seqs = [drop_shared(s, len(shared)) for s in seqs]
            lengths = lengths - len(shared)
        ids = [None if r.data is None else r.data.get(self.fields.id) for r in rows]
        id_type = id_type or self.id_type
        # an input whose schema has the id column keeps it, with or without rows (docs/input-output.md: Output)
        has_id = id_type is not None or any(r.data is not None and self.fields.id in r.data for r in rows)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        chunked = np.concatenate(chunks) if self.chunking and chunks else None
        labels = [None if r is None else r.labels for r in parsed]
        labelled = labels if any(g is not None for g in labels) else None
        batches, planned = self.family.plan(seqs, lengths, self.max_batch_tokens, offsets, chunked)
        return Prepared(
            ids,
            has_id,
            errors,
            offsets,
            seqs,
            batches,
            num_tokens,
            shared,
            id_type,
            chunked,
            first,
            labels=labelled,
            planned=planned,
            copies=copies,
        )

    def _shared_prefix(self, prefixes: list[np.ndarray]) -> np.ndarray:
        """The prefix tokens the window's rows all start with, when worth computing once
        (`attention.shared`); empty when not shared."""
        none = np.zeros(0, dtype=np.int64)
        if not self.shares_prefix:
            return none
        c = shared_prefix_len(prefixes)
        return prefixes[0][:c].astype(np.int64) if c >= MIN_SHARED_TOKENS else none

    def _parse(self, raw: RawRow) -> tuple[Row | None, str | None]:
        try:
            if raw.error is not None:
                raise InputError(f"{raw.where}: {raw.error}")
            return parse_row(raw.data, raw.where, self.fields), None
        except InputError as exc:
            self._fail(exc)
            return None, str(exc)

    def _fail(self, exc: InputError) -> None:
        if not self.config.skip_bad_rows:
            raise exc

    # ---- model stages -----------------------------------------------------------------

    def run(self, prepared: Prepared, on_batch: Callable[[int, int], None] | None = None) -> pa.Table:
        """Score a prepared window; `on_batch(items, tokens)` is called as each batch is done.

        Batches are launched back to back; their results stay on the device until the window
        ends and come back in one copy (`engine.batches.Readback`)."""
        return self.table(prepared, self.values(prepared, on_batch))

    def table(self, window, values: np.ndarray) -> pa.Table:
        """The output table of `window` (a `Prepared`, or any object with its row fields) from
        its items' values [items, labels + hidden]."""
        n_labels = len(self.spec.label_names)
        table = self._table(window, values[:, :n_labels], values[:, n_labels:])
        if self.config.compact and n_labels == 1 and hasattr(self, "self_check_note"):
            table = table.drop_columns(["scores"])  # `score` holds the same (the self-check reads `scores`)
        return table

    def values(self, prepared: Prepared, on_batch: Callable[[int, int], None] | None = None) -> np.ndarray:
        """[items, labels + hidden] float32: a prepared window's items' scores (and hidden states)."""
        chunks = prepared.chunks
        done = self.family.done_entries(prepared.item_offsets, chunks)  # entries that complete an item
        readback = Readback(self.loaded.device, on_batch, done)
        if self.shares_prefix:
            self.forward.share(prepared.shared)
        self.family.begin(prepared.planned)
        streams = len(self.streams)
        concurrent = streams > 1 and len(prepared.batches) > 1 and torch.get_num_threads() >= streams
        checked = hasattr(self, "self_check_note")  # not the self-check's own probe
        open_routed(self, prepared.seqs, prepared.batches, len(prepared.shared))  # a runtime made as first needed
        for index, tokens, result in (self._run_streams if concurrent else self._run_serial)(prepared):
            readback.add(index, tokens, result)
            if checked:
                mark("first batch launched")
        out = readback.gather(prepared.num_entries, self.family.entry_width)
        if prepared.copies is not None:
            dst, src = prepared.copies
            out[dst] = out[src]
            if on_batch is not None:  # their items are done too
                on_batch(len(dst) if done is None else int(done[dst].sum()), 0)
        if checked:
            mark("first window scored")
        out = self.family.finish(out, prepared.item_offsets, chunks)
        if chunks is not None:
            out = aggregate(out, out[:, self.spec.positive_index], chunks, self.chunking.aggregate)
        return out

    def _run_serial(self, prepared: Prepared) -> Iterator[tuple[np.ndarray, int, torch.Tensor]]:
        """Every batch's (item index, tokens, scores on the device), one at a time (`engine.batches`)."""
        shared, device = len(prepared.shared), self.loaded.device
        return run_serial(prepared.seqs, prepared.batches, shared, self._score_batch, self._switch, device)

    def _run_streams(self, prepared: Prepared) -> Iterator[tuple[np.ndarray, int, torch.Tensor]]:
        """The same, computed by `self.streams` in threads (`engine.batches`)."""
        return run_streams(prepared.seqs, prepared.batches, len(prepared.shared), self._score_batch, self.streams)

    def _switch(self, err: Exception) -> bool:
        """After a batch failed with `err`: switch to the `auto` fallback (False: there is none)."""
        if self.fallback is None:
            return False
        self.fall_back(err)
        return True

    def fall_back(self, err: Exception) -> None:
        """Switch to `self.fallback` for the rest of the run, with a warning (once)."""
        warnings.warn(
            f"--attention auto: {self.backend_name} failed ({error_line(err, 200)}); using {self.fallback}",
            RuntimeWarning,
            stacklevel=2,
        )
        self.family.use_backend(self.fallback)
        self.fallback = None
        free_cache(self.loaded.device)

    def _score_batch(self, batch, forward=None) -> torch.Tensor:
        return self.family.score_batch(batch, forward)

    def score_rows(self, rows: Iterable[RawRow | Mapping[str, Any]], id_type: pa.DataType | None = None) -> pa.Table:
        """Score rows (one window) into an output table: `RawRow`s, or records as dicts (a JSON
        line's fields; named `row N` in errors), in a list or any iterable.

        Raises:
            TypeError: `rows` is a table (`score_table` takes one), a single record or text, or
                holds something else than records (`io.formats.given_rows`)."""
        return self.run(self.prepare(given_rows(rows), id_type))

    def score_table(self, table: pa.Table) -> pa.Table:
        """Score an Arrow table of input rows; returns the output columns, in row order
        (the id column keeps its type in `table`). With `progress`, a progress line on stderr.

        Raises:
            TypeError: `table` is no Arrow table or record batch (a pandas DataFrame, a list)."""
        if not isinstance(table, (pa.Table, pa.RecordBatch)):
            raise TypeError(
                f"score_table takes a pyarrow.Table, got {type(table).__name__}"
                + (" (pyarrow.Table.from_pandas(df, preserve_index=False) makes one)" if hasattr(table, "iloc") else "")
            )
        rows, id_type = table_rows(table, self.fields.id)
        if not self.progress:
            return self.score_rows(rows, id_type)
        with tracked(len(rows)) as tracker:
            prepared = self.prepare(rows, id_type)
            tracker.window(prepared)
            table = self.run(prepared, tracker.work)
            tracker.rows(len(rows))
        return table

    # ---- output -----------------------------------------------------------------------

    def _table(self, prepared, scores: np.ndarray, hidden: np.ndarray) -> pa.Table:
        cfg = self.config
        hidden_dtype = (
            (cfg.hidden_dtype if cfg.hidden_dtype == "float16" else "float32") if self.hidden_pooling else None
        )
        cols = Columns(
            self.fields.id,
            self.fields.labels,
            self.spec.positive_index,
            cfg.top_k,
            self.chunking is not None,
            hidden_dtype,
            cfg.skip_bad_rows,
        )
        return window_table(prepared, scores, hidden, cols, self.metadata)

    def empty_table(self) -> pa.Table:
        """The output table of zero rows (same columns and types as a scored window)."""
        return self.run(self.prepare([]))

    @property
    def metadata(self) -> dict[str, str]:
        """Provenance recorded in the output file."""
        spec = self.spec
        route = getattr(getattr(self.family, "forward", None), "route", None)  # `auto` ran two runtimes by length
        return {
            "scorecli_version": __version__,
            "model": path_text(str(self.loaded.path)),
            "kind": spec.kind,
            "architecture": self.loaded.architecture,
            "template": self.template.name,
            "mode": "mis" if spec.mis else "single",
            "mode_reason": f"single-item only: {spec.single_reason}" if spec.single_reason else "",
            "label_tokens": ",".join(spec.label_names) if spec.label_ids is not None else "",
            "label_token_ids": ",".join(map(str, spec.label_ids or ())),
            "labels": ",".join(spec.label_names),
            "activation": spec.activation,
            "similarity": spec.similarity,
            "dtype": str(self.loaded.dtype).removeprefix("torch."),
            "attention": self.backend_name,
            "runtime": self.runtime,
            "runtime_cut_tokens": str(route.cut) if route is not None and route.second is not None else "",
            "runtime_reason": getattr(self.family, "runtime_reason", "the only runtime of this kind"),
            "self_check": getattr(self, "self_check_note", "not run"),
            "device": str(self.loaded.device),
        } | (self.drift.metadata() if getattr(self, "drift", None) else {})
