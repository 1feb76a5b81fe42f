"""A Scorer behind pair keys (docs/long-jobs.md: Nightly jobs): what a window's pairs already have is reused,
only the rest is scored.

`Reusing` is what the engines score windows with (`engine.run`, `engine.ray_workers`): the same
`prepare` / `run` / `metadata` / `empty_table` as `scorecli.scorer.Scorer`, which it loads only
when a window has a pair to score. Per window: rows are validated, their pairs keyed
(`keys`), looked up (`index`: the cache's segments and this job's own entries), split into hits,
pairs to score and repeats (`window.plan`); the Scorer prepares and scores the rows of missing
items only; the values are merged back in item order and the output table is built as for an
uncached window; the new entries are added as the window ends (one segment, durable before
the next window's output is). Without `--score-cache` the job's own entries still make a pair that
recurs be scored once.

The settings a run's flags resolve to are known only once a model is loaded; the cache maps the
flags as given (`identity.request_digest`) to them (`requests/`), so a later run whose every
pair hits loads no model at all. A window whose rows fail (a bad row) is prepared whole, without
reuse, so that its errors read exactly as an uncached run's. Knows nothing about files beyond
the cache, progress or the command line.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np
import pyarrow as pa

from scorecli.cache.identity import model_identity, request_digest, settings_digest, settings_of
from scorecli.cache.index import Index
from scorecli.cache.keys import keys_of
from scorecli.cache.segments import Entries
from scorecli.cache.store import CacheStore
from scorecli.cache.window import Plan, plan
from scorecli.core.rows import Fields, Row, parse_row
from scorecli.engine.job import FROM_CACHE
from scorecli.errors import InputError, notice
from scorecli.io.columns import Columns, window_table
from scorecli.io.readers import RawRow
from scorecli.io.schema import with_metadata
from scorecli.model.hub import path_text
from scorecli.runtimes import auto_device
from scorecli.version import __version__

# entries of its own a job keeps in memory to find repeats across windows (16 bytes of key and a
# few of scores each, ~85 MB at this count; merging them, `cache.index.Index.add`, takes a few
# times that for a moment: a job at the cap peaked at ~490 MB of memory); with a cache they are in
# its segments too. Beyond it the oldest are dropped, and a pair met again is scored again
JOB_ENTRIES = 4_000_000


def _request(cfg, cache: CacheStore) -> tuple[str, str | None, str | None, dict | None]:
    """(device, model identity, request digest, the settings recorded for it) of a run of `cfg`."""
    device = cfg.device if cfg.device != "auto" else auto_device()
    identity = model_identity(cfg.model, cache.memo)
    if identity is None:
        return device, None, None, None
    request = request_digest(cfg, identity, device, __version__)
    return device, identity, request, cache.request(request)


def settings_recorded(cfg) -> bool:
    """Whether `cfg.score_cache` holds the settings a run of `cfg` resolves, so that its hits
    load no model (`Reusing`)."""
    return bool(cfg.score_cache) and _request(cfg, CacheStore(cfg.score_cache, create=True))[3] is not None


@dataclass
class Figures:
    """What the reuse did: pairs found (`hits`) and not (`misses`) in the cache or earlier in the job."""

    hits: int = 0
    misses: int = 0

    def add(self, other: Figures) -> None:
        self.hits += other.hits
        self.misses += other.misses

    @classmethod
    def of(cls, metadata: dict[str, str]) -> Figures:
        """The counts an output's or a kept part's metadata holds (`metadata`; none where it holds none)."""
        return cls(int(metadata.get("score_cache_hits") or 0), int(metadata.get("score_cache_misses") or 0))

    def metadata(self) -> dict[str, str]:
        """The counts as the output's metadata holds them (every engine's)."""
        return {"score_cache_hits": str(self.hits), "score_cache_misses": str(self.misses)}


@dataclass
class CachedWindow:
    """A prepared window: its rows, their plan, and the Scorer's `Prepared` of the rows to score."""

    rows: list[RawRow]
    parsed: list[Row | None]
    errors: list[str | None]
    keys: np.ndarray
    plan: Plan
    hit_scores: np.ndarray
    hit_chunks: np.ndarray | None
    inner: Any = None  # scorer.Prepared of the items to score (None: nothing to score)
    whole: bool = False  # prepared without reuse (a bad row): `inner` is the whole window
    id_type: pa.DataType | None = None
    figures: Figures = field(default_factory=Figures)
    version: int = 0  # the job's entries it was looked up in (`Index.version`)

    @property
    def num_rows(self) -> int:
        return len(self.rows)

    @property
    def num_items(self) -> int:
        return int(self.plan.offsets[-1])

    @property
    def num_tokens(self) -> np.ndarray:
        """Tokens the window's forward passes compute, per row scored (hits and repeats cost none:
        the ETA counts what is left to compute)."""
        return np.zeros(0, dtype=np.int64) if self.inner is None else self.inner.num_tokens


def _items(column: pa.ChunkedArray, rows: list[bool]) -> list:
    """The per-item values of an output list column (`scores`, `num_chunks`), of the rows marked."""
    return [x for ok, got in zip(rows, column.to_pylist()) if ok for x in got]


@dataclass
class _Merged:
    """The row fields of a window's output table (`io.columns.window_table`)."""

    ids: list
    has_id: bool
    errors: list[str | None]
    item_offsets: np.ndarray
    num_tokens: np.ndarray
    id_type: pa.DataType | None
    chunks: np.ndarray | None
    labels: list[np.ndarray | None] | None = None  # each row's relevance grades; None: no row has any

    @property
    def num_items(self) -> int:
        return int(self.item_offsets[-1])


class Reusing:
    """Scores windows with what is known reused. Args: the run's config; `load()` builds the
    Scorer (called at most once, when a pair must be scored or the settings are not known yet);
    `cache`: the score cache (None: repeats within the job only)."""

    def __init__(self, cfg, load: Callable[[], Any], cache: CacheStore | None = None):
        self.config, self._load, self.cache = cfg, load, cache
        self.fields = Fields.of(cfg)
        self.id_type: pa.DataType | None = None
        self.scorer: Any = None
        self.figures = Figures()
        self.lookups = not cfg.pooled_hidden_states  # hidden states are not cached: every pair is scored
        self.own: list[str] = []  # segments this run wrote
        self.sampler: Any = None  # the audit's (`checks.audit.Sampler`), when asked
        self.record: dict | None = None
        self.identity: str | None = None
        self.request: str | None = None
        self.served = 0  # pairs windows took from the cache before the model loaded
        if cache is not None:
            self.device, self.identity, self.request, self.record = _request(cfg, cache)
        if self.record is None:
            self.loaded()  # the settings come from the model
        else:
            self._use(self.record)
        if cfg.audit:
            from scorecli.checks.audit import Sampler, cost_note

            notice(cost_note(cfg.audit))
            self.sampler = Sampler(cfg.audit, int(self.record["labels"]), int(self.record["positive_index"]))

    # ---- the model, the settings ------------------------------------------------------

    def loaded(self):
        """The Scorer, loaded now if it was not (and the settings it resolves recorded)."""
        if self.scorer is not None:
            return self.scorer
        scorer = self._load()
        scorer.id_type = self.id_type
        self.scorer = scorer
        if self.cache is None:
            record = {"settings": os.urandom(16).hex()}  # repeats within this job only
        else:
            self._identify()
            settings = settings_digest(settings_of(scorer, self.identity or "unknown"))
            record = {"settings": settings, "metadata": scorer.metadata, "identity": self.identity}
        record |= {"labels": len(scorer.spec.label_names), "positive_index": scorer.spec.positive_index}
        if self.cache is not None and self.identity is None:
            self.cache = None  # nothing to key it by: this run reuses within itself only
        elif (
            self.cache is not None
            and self.request is not None
            and (self.record or {}).get("settings") != record["settings"]
        ):
            self.cache.save_request(self.request, record)
        if self.record is None or self.record.get("settings") != record["settings"]:
            self._use(record)
        self.record = record
        return scorer

    def _identify(self) -> None:
        """The model's identity hashed again once it is loaded (its files' stamps: the memo): a Hub id's
        load may fetch a newer commit than the snapshot hashed at the start (or the first), a folder
        may be replaced while the first windows were served from the cache. The scores it gives
        are keyed by the files it was loaded from."""
        identity = model_identity(self.config.model, self.cache.memo)  # type: ignore[union-attr]
        if identity is None or identity == self.identity:
            return
        if self.identity is not None and self.served:
            warnings.warn(
                f"the model's files changed after the run began (a newer commit fetched, a folder replaced): "
                f"{self.served:,} pairs of the windows before came from the score cache under the files it began with",
                RuntimeWarning,
                stacklevel=3,
            )
        self.identity = identity
        self.request = request_digest(self.config, identity, self.device, __version__)

    def _use(self, record: dict) -> None:
        """Key pairs under `record`'s settings, and open what the cache holds for them."""
        self.record = record
        self.salt = bytes.fromhex(record["settings"])
        self.profile = record["settings"]
        chunked = self.config.chunk_tokens is not None
        self.index = Index(int(record["labels"]), chunked, JOB_ENTRIES)
        if self.cache is not None and self.lookups:
            for name in self.cache.segment_names(self.profile):
                entries = self.cache.read(self.profile, name)
                if entries is not None and (entries.chunks is not None) == chunked:
                    self.index.open(entries)

    @property
    def model_info(self) -> dict[str, str]:
        return {"identity": self.identity or "", "name": path_text(str(self.config.model))}

    # ---- windows ----------------------------------------------------------------------

    def _parse(self, raw: RawRow) -> tuple[Row | None, str | None]:
        try:
            if raw.error is not None:
                raise InputError(f"{raw.where}: {raw.error}")
            return parse_row(raw.data, raw.where, self.fields), None  # type: ignore[arg-type]
        except InputError as exc:
            if not self.config.skip_bad_rows:
                raise
            return None, str(exc)

    def prepare(self, rows: list[RawRow], id_type: pa.DataType | None = None) -> CachedWindow:
        """Validate and key a window's rows, look their pairs up, and prepare the rows of the
        pairs still to score (loading the model if it is not)."""
        parsed, errors = zip(*(self._parse(r) for r in rows)) if rows else ((), ())
        parsed, errors = list(parsed), list(errors)
        keys, offsets = keys_of(self.salt, parsed)
        version = self.index.version  # before the lookup: an add that lands during it counts after
        if self.lookups:
            found, hit_scores, hit_chunks = self.index.lookup(keys)
        else:
            found, hit_scores, hit_chunks = np.zeros(len(keys), bool), np.zeros((len(keys), 0), np.float32), None
        p = plan(parsed, keys, offsets, found)
        window = CachedWindow(rows, parsed, errors, keys, p, hit_scores, hit_chunks, id_type=id_type or self.id_type)
        window.figures = Figures(p.hits, p.misses)
        window.version = version
        if len(p.scored):
            salt = self.salt
            scorer = self.loaded()
            if self.salt != salt:  # the model resolved other settings than the request recorded: key again
                return self.prepare(rows, id_type)
            try:
                window.inner = scorer.prepare_parsed(rows, p.rows, errors, window.id_type)
                failed = any(e is not None and errors[k] is None for k, e in enumerate(window.inner.errors))
            except InputError:
                failed = True
            if failed:  # a bad row: the window as an uncached run prepares it, errors and all
                window.inner, window.whole = scorer.prepare(rows, window.id_type), True
                window.figures = Figures(0, window.inner.num_items)
        elif self.scorer is None:
            self.served += p.hits
        return window

    def run(self, window: CachedWindow, on_batch: Callable[[int, int], None] | None = None) -> pa.Table:
        """Score a prepared window's missing pairs; its output table, as an uncached run's, whose
        metadata counts the job's hits and misses so far (a resumed job's kept part says them:
        `resumed`)."""
        table = self._run(window, on_batch)
        if self.cache is None:
            return table
        return table.replace_schema_metadata(with_metadata(table.schema, self.closing_metadata()).metadata)

    def resumed(self, kept: dict[str, str]) -> None:
        """A resumed job's counts so far: those its last kept part was written with."""
        self.figures = Figures.of(kept)

    def _run(self, window: CachedWindow, on_batch: Callable[[int, int], None] | None) -> pa.Table:
        p, inner = window.plan, window.inner
        if window.whole:
            self.figures.add(window.figures)
            values = self.scorer.values(inner, on_batch)
            good = [k for k, e in enumerate(inner.errors) if e is None and window.parsed[k] is not None]
            keys = [window.keys[p.offsets[k] : p.offsets[k + 1]] for k in good]
            self._remember(np.concatenate(keys) if keys else window.keys[:0], values, inner.chunks)
            if self.sampler is not None:  # the good rows' pairs, all scored now
                offsets = np.concatenate([[0], np.cumsum([p.offsets[k + 1] - p.offsets[k] for k in good])])
                rows, parsed = [window.rows[k] for k in good], [window.parsed[k] for k in good]
                self.sampler.offer(rows, parsed, offsets.astype(np.int64), np.zeros(int(offsets[-1]), bool), values)
            return self.scorer.table(inner, values)
        if inner is not None and self.lookups and self.index.version != window.version:
            window = self._again(window)  # the window before added entries after this one was prepared
            p, inner = window.plan, window.inner
        self.figures.add(window.figures)
        if on_batch is not None and (p.hits or len(p.repeats)):
            on_batch(p.hits + len(p.repeats), 0)  # items done without a forward
        if inner is not None:
            scored = self.scorer.values(inner, on_batch)
            self._remember(window.keys[p.scored], scored, inner.chunks)
        else:
            scored = np.zeros((0, int(self.record["labels"])), np.float32)
        values = p.merge(window.hit_scores, scored, scored.shape[1])
        chunks = p.merge_chunks(window.hit_chunks, inner.chunks if inner is not None else None)
        merged = self._merged(window, chunks, inner)
        if self.sampler is not None:
            self.sampler.offer(window.rows, window.parsed, p.offsets, p.found, values)
        if self.scorer is not None:
            return self.scorer.table(merged, values)
        return self._table(merged, values)

    def _again(self, window: CachedWindow) -> CachedWindow:
        """`window` with the pairs the job scored since it was prepared (in the window before,
        which ran while this one was prepared) taken as hits, and its rows prepared again if
        there were any (else as it was)."""
        p = window.plan
        missing = np.flatnonzero(~p.found)  # the pairs it would score and their repeats in later rows
        found, scores, chunks = self.index.lookup(window.keys[missing])
        if not found.any():
            return window
        hit = missing[found]
        window.plan.found[hit] = True
        window.hit_scores[hit] = scores[found]
        if window.hit_chunks is not None and chunks is not None:
            window.hit_chunks[hit] = chunks[found]
        window.plan = plan(window.parsed, window.keys, p.offsets, window.plan.found)
        window.figures = Figures(window.plan.hits, window.plan.misses)
        window.inner = None
        if len(window.plan.scored):
            window.inner = self.scorer.prepare_parsed(window.rows, window.plan.rows, window.errors, window.id_type)
        return window

    def seed(self, rows: Iterator[RawRow], tables: Iterable[pa.Table]) -> None:
        """A resumed job's kept windows: `tables`, their parts in input order, and `rows`, the
        input's rows they hold (read again: not tokenized, not scored). Their pairs join the
        job's entries part by part as the uninterrupted run added them (a window's pairs not
        found before it; all its good pairs where a row failed, as `run` adds a whole window),
        with the scores the parts hold, so the windows after the kept ones reuse what that run
        reused and batch as it did: their scores are its scores, bit for bit (SPEC 11). The audit
        samples their pairs as that run did (with the scores the parts hold)."""
        if not self.lookups and self.sampler is None:
            return
        labels = int(self.record["labels"])
        for table in tables:
            window = list(islice(rows, table.num_rows))
            errors = table["error"].to_pylist() if "error" in table.column_names else [None] * table.num_rows
            parsed = [None if e is not None else self._parse(raw)[0] for raw, e in zip(window, errors)]
            keys, offsets = keys_of(self.salt, parsed)
            scored = [row is not None and bool(row.items) for row in parsed]  # the rows `keys` holds items of
            column = table["scores"] if "scores" in table.column_names else table["score"]
            scores = np.array(_items(column, scored), dtype=np.float32).reshape(len(keys), labels)
            chunks = np.array(_items(table["num_chunks"], scored)) if self.config.chunk_tokens is not None else None
            if self.sampler is not None:
                self.sampler.offer(window, parsed, offsets, None, scores)  # hit or miss: the part does not say
            if not self.lookups:
                continue
            if any(e is not None for e in errors):
                new = np.arange(len(keys))
            else:
                new = plan(parsed, keys, offsets, self.index.lookup(keys)[0]).scored
            if len(new):
                self.index.add(self._entries(keys[new], scores[new], None if chunks is None else chunks[new]))

    def _remember(self, keys: np.ndarray, values: np.ndarray, chunks: np.ndarray | None) -> None:
        """Add a window's newly scored pairs (keys [m, 2], values [m, labels + hidden], chunks
        [m] or None) to the job's entries and, durably, to the cache."""
        if not len(keys):
            return
        entries = self._entries(keys, values, chunks)
        self.index.add(entries)
        if self.cache is not None:
            name = self.cache.add(self.profile, entries, self.model_info)  # None: a read-only cache
            if name is not None:
                self.own.append(name)

    def _entries(self, keys: np.ndarray, values: np.ndarray, chunks: np.ndarray | None) -> Entries:
        """Entries of pairs (keys [m, 2]) with their scores (the first labels of values [m, labels
        + hidden]) and, where items are chunked, their chunks (None: one each)."""
        labels = int(self.record["labels"])
        if self.config.chunk_tokens is not None:
            chunks = (chunks if chunks is not None else np.ones(len(keys))).astype(np.int32)
        else:
            chunks = None
        return Entries.of(keys, np.ascontiguousarray(values[:, :labels]), chunks)

    def _merged(self, window: CachedWindow, chunks: np.ndarray | None, inner) -> _Merged:
        ids = [None if r.data is None else r.data.get(self.fields.id) for r in window.rows]
        has_id = window.id_type is not None or any(r.data is not None and self.fields.id in r.data for r in window.rows)
        tokens = inner.num_tokens if inner is not None else np.zeros(len(window.rows), np.int64)
        labels = [None if r is None else r.labels for r in window.parsed]
        labelled = labels if any(g is not None for g in labels) else None
        return _Merged(ids, has_id, window.errors, window.plan.offsets, tokens, window.id_type, chunks, labelled)

    def _table(self, merged: _Merged, values: np.ndarray) -> pa.Table:
        """A window's table with no model loaded (every pair a hit): as the Scorer builds it."""
        cfg, labels = self.config, int(self.record["labels"])
        cols = Columns(
            id_field=cfg.id_field,
            labels_field=cfg.labels_field,
            positive_index=int(self.record["positive_index"]),
            top_k=cfg.top_k,
            chunked=cfg.chunk_tokens is not None,
            hidden_dtype=None,
            errors=cfg.skip_bad_rows,
        )
        table = window_table(merged, values[:, :labels], values[:, labels:labels], cols, self.metadata)
        return table.drop_columns(["scores"]) if cfg.compact and labels == 1 else table

    def score_rows(self, rows: list[RawRow], id_type: pa.DataType | None = None) -> pa.Table:
        return self.run(self.prepare(rows, id_type))

    def empty_table(self) -> pa.Table:
        return self.run(self.prepare([]))

    @property
    def metadata(self) -> dict[str, str]:
        """The output's metadata: the Scorer's, or (no model loaded) the run's that resolved these settings."""
        if self.scorer is not None:
            return self.scorer.metadata
        meta = dict((self.record or {}).get("metadata") or {})
        return meta | {"model": path_text(str(self.config.model)), "self_check": FROM_CACHE}

    def closing_metadata(self) -> dict[str, str]:
        """Keys known once every window is scored: the cache's counts."""
        if self.cache is None:
            return {}
        return self.figures.metadata()

    def audit(self):
        """The audit's verdict on the pairs sampled from this run (`checks.audit`)."""
        from scorecli.checks.audit import audit

        return audit(self.sampler, self.config, self.scorer, self.loaded, self.metadata.get("dtype", "float32"))

    def close(self) -> None:
        """After the last window: this run's segments become one, and a cache whose segments
        piled up is compacted."""
        if self.cache is not None and self.cache.read_only is not None and self.cache.not_added:
            warnings.warn(
                f"score cache {self.cache.shown}: not writable ({self.cache.read_only}): hits were served from it, "
                f"and this run's {self.cache.not_added:,} newly scored pairs were not added to it",
                RuntimeWarning,
                stacklevel=2,
            )
            self.cache.not_added = 0
        if self.cache is None or not self.own:
            return
        self.cache.tidy(self.profile, self.own, self.model_info)
        self.own = []
