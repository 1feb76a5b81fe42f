"""`--audit N` (docs/long-jobs.md: Nightly jobs): N pairs of the run, drawn evenly from all its rows (hits and
misses alike), re-scored one at a time through the model's own transformers forward in float32.

A cache makes a wrong score last; the start-up self-check proves the run's path on a probe, the
audit on the user's own rows. `Sampler` keeps a uniform sample of the run's pairs as windows
finish (reservoir sampling, seeded: the same run audits the same pairs), with what the run gave
them; `audit` re-scores them after the last window: each (query, item) as the run encodes it,
each chunk alone (P + chunk, the pair, or the text) through the model's own forward (eager
attention, no speed-ups), chunks aggregated as the run aggregates them. It records the largest
difference, the share of audited rows whose order of items would change with the reference's
scores in place of the run's, and N (relative to the reference's score above 1 for the kinds whose
scores are sums that grow with the texts: MaxSim, sparse dot products). The tolerance is float32's 1e-4; a 16-bit run's is the noise
of its dtype measured on the same pairs (twice the largest difference between the model's own
forward in that dtype and in float32, at least 1e-4). Knows nothing about files or the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from scorecli.core.ranking import aggregate, top_k
from scorecli.core.rows import Row
from scorecli.io.readers import RawRow
from scorecli.kinds import KINDS
from scorecli.kinds.heads import activate
from scorecli.kinds.probes import _embedding_references, _references
from scorecli.model.sentence import similarity
from scorecli.runtimes import runtime_info

TOLERANCE_FP32 = 1e-4
SEED = 20261126


@dataclass
class Pair:
    """One audited pair: its row with only that item, the run's values, its row's scores."""

    row: Row
    where: str
    k: int  # the item's index in its row
    ours: np.ndarray  # [labels] the run's scores
    row_scores: np.ndarray  # [items] the row's `score`, as the run wrote them
    row_key: tuple[int, int]  # (window, row): pairs of one row are judged together
    hit: bool | None  # None: a pair of the rows an earlier run of a resumed job kept (not recorded)


@dataclass
class Sampler:
    """A uniform sample of `n` pairs of the run, kept as its windows finish."""

    n: int
    labels: int = 1
    positive: int = 0
    seen: int = 0
    windows: int = 0
    pairs: list[Pair] = field(default_factory=list)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(SEED))

    def offer(
        self, rows: list, parsed: list, offsets: np.ndarray, found: np.ndarray | None, values: np.ndarray
    ) -> None:
        """A finished window's good rows (`RawRow`s and their parsed `Row`s), where each row's items
        start (`offsets`, [rows + 1]), which items were cache hits (None: a kept window of a resumed
        job, whose part does not say), and the items' values [items, >= labels]."""
        m = int(offsets[-1])
        t = self.seen + np.arange(m)
        # algorithm R: item t is taken into slot j (uniform in [0, t]) when j < n
        slots = np.where(t < self.n, t, (self.rng.random(m) * (t + 1)).astype(np.int64))
        for i in np.flatnonzero(slots < self.n):
            row = int(np.searchsorted(offsets, i, side="right") - 1)
            one, a, b = parsed[row], int(offsets[row]), int(offsets[row + 1])
            k = int(i) - a
            pair = Pair(
                Row(one.query, [one.items[k]], one.instruction, None),
                rows[row].where,
                k,
                values[i, : self.labels].astype(np.float64),
                values[a:b, self.positive].astype(np.float64),
                (self.windows, row),
                None if found is None else bool(found[i]),
            )
            if len(self.pairs) < self.n:
                self.pairs.append(pair)
            else:
                self.pairs[int(slots[i])] = pair
        self.seen += m
        self.windows += 1


@dataclass(frozen=True)
class Verdict:
    pairs: int
    hits: int
    max_diff: float
    rows: int
    reordered: float  # share of audited rows
    tolerance: float
    asked: int = 0  # --audit N: more than `pairs` when the run held fewer
    kept: int = 0  # pairs of a resumed job's kept rows: whether the cache gave them is not known
    relative: bool = False  # `max_diff` is relative to the reference's score where that is above 1
    approximate: bool = False  # the run's runtime drifts by design (int8): measured, not judged

    @property
    def passed(self) -> bool:
        return self.approximate or self.max_diff <= self.tolerance  # NaN fails

    def metadata(self) -> dict[str, str]:
        return {
            "audit_pairs": str(self.pairs),
            "audit_max_score_diff": f"{self.max_diff:.3g}",
            "audit_rows_reordered": f"{self.reordered:.4g}",
            "audit_tolerance": f"{self.tolerance:.3g}",
        }

    def line(self) -> str:
        reused = f"{self.hits} of them reused" if self.pairs != 1 else ("reused" if self.hits else "not reused")
        if self.kept:  # this run saw the others; a kept part does not say whether the cache gave its scores
            said = "it is" if self.pairs == 1 else f"{self.kept} of them are"
            reused = f"{said} from the kept rows" + (
                "" if self.kept == self.pairs else f", {self.hits} of the rest reused"
            )
        if self.pairs < self.asked:
            reused = f"all the run's, fewer than --audit {self.asked}; {reused}"
        return (
            f"audit: {self.pairs} pair{'s' * (self.pairs != 1)} ({reused}) re-scored through the model's own "
            f"float32 forward: largest difference {self.max_diff:.2g} ({'relative above 1; ' * self.relative}"
            f"tolerance {self.tolerance:.2g}); "
            f"{self.reordered:.1%} of {self.rows} audited row{'s' * (self.rows != 1)} would order their items "
            "otherwise: "
            + (
                "measured, not judged (int8 scores drift from float32's by design)"
                if self.approximate
                else ("passed" if self.passed else "BEYOND TOLERANCE")
            )
        )


def cost_note(n: int) -> str:
    """What `--audit n` costs, said before the run, which may hold fewer pairs (the closing `audit:`
    line says how many were re-scored)."""
    some = f"{n} of the run's pairs (all of them, should it hold fewer) are" if n > 1 else "1 of the run's pairs is"
    return (
        f"--audit {n}: after the last window, {some} re-scored one at a time through the model's own float32 "
        "forward (a forward each, one per chunk of a long item; the model loads in float32 if the run's does not)"
    )


def reference_scorer(cfg, run_scorer):
    """A Scorer whose model runs the reference: the run's own when it is float32 torch, else
    the model loaded again in float32."""
    from scorecli.scorer import Scorer

    if run_scorer is not None and run_scorer.loaded.dtype == torch.float32 and run_scorer.runtime == "torch":
        return run_scorer
    ref = replace(cfg, dtype="float32", runtime="torch", compile="off", self_check=False, score_cache=None)
    return Scorer(ref.model, ref)


def audit(sampler: Sampler, cfg, run_scorer, load, dtype: str) -> Verdict:
    """Re-score the sampled pairs of a run in `dtype`; `load()` builds the run's Scorer (a 16-bit
    run's noise is measured with its own model) when the run loaded none."""
    pairs = sampler.pairs
    ref = reference_scorer(cfg, run_scorer)
    theirs = reference_scores(ref, pairs)
    relative = KINDS[ref.spec.kind].relative_scores  # MaxSim and sparse sums: relative above 1 (SPEC 17)
    scale = np.maximum(1.0, np.abs(theirs)) if relative and pairs else 1.0
    tolerance = TOLERANCE_FP32
    if dtype != "float32" and pairs:  # a 16-bit run: its dtype's own noise on these pairs
        own = run_scorer if run_scorer is not None else load()
        noise = (np.abs(reference_scores(own, pairs) - theirs) / scale).max(initial=0.0)
        tolerance = max(TOLERANCE_FP32, 2 * float(noise))
    ours = np.stack([p.ours for p in pairs]) if pairs else np.zeros((0, sampler.labels))
    diff = float((np.abs(ours - theirs) / scale).max(initial=0.0)) if pairs else 0.0
    if pairs and not np.isfinite(ours - theirs).all():
        diff = float("nan") if not np.array_equal(np.isnan(ours), np.isnan(theirs)) else diff
    rows, reordered = _reordered(pairs, theirs[:, sampler.positive] if pairs else np.zeros(0), tolerance)
    hits = sum(p.hit is True for p in pairs)
    kept = sum(p.hit is None for p in pairs)
    approximate = runtime_info(cfg.runtime).approximate
    return Verdict(len(pairs), hits, diff, rows, reordered, tolerance, sampler.n, kept, relative, approximate)


def _reordered(pairs: list[Pair], reference: np.ndarray, tolerance: float) -> tuple[int, float]:
    """(audited rows, the share whose items' order changes with the reference's scores in place).
    A score within `tolerance` of the reference's is float noise and stays: two items that tie
    exactly (the same text twice) would otherwise swap on a last bit."""
    rows: dict[tuple[int, int], list[int]] = {}
    for j, p in enumerate(pairs):
        rows.setdefault(p.row_key, []).append(j)
    changed = 0
    for members in rows.values():
        scores = pairs[members[0]].row_scores
        other = scores.copy()
        for j in members:
            if not abs(other[pairs[j].k] - reference[j]) <= tolerance:  # NaN too
                other[pairs[j].k] = reference[j]
        offsets = np.array([0, len(scores)])
        if not np.array_equal(top_k(scores, offsets, len(scores))[1], top_k(other, offsets, len(scores))[1]):
            changed += 1
    return len(rows), (changed / len(rows) if rows else 0.0)


def reference_scores(scorer, pairs: list[Pair]) -> np.ndarray:
    """[pairs, labels] float64: each pair's scores from the model's own forward, one sequence at a
    time, as `scorer` encodes, chunks and aggregates it."""

    info = KINDS[scorer.spec.kind]
    out = []
    for p in pairs:
        prepared = scorer.prepare_parsed([RawRow({}, p.where)], [p.row], [None])
        if prepared.errors[0] is not None or not prepared.seqs:
            out.append(np.full(len(scorer.spec.label_names), np.nan))
            continue
        apart = scorer.family.reference_entries
        if apart is not None:
            index, values = apart(prepared.seqs)
        else:
            run = _texts if info.similarity else _pairs if info.pairs else _decoder
            index, values = run(scorer, prepared.seqs)
        entries = np.zeros((prepared.num_entries, values.shape[1]))
        entries[index] = values
        if prepared.copies is not None:  # an entry whose sequence repeats another's (a chunk, a text)
            entries[prepared.copies[0]] = entries[prepared.copies[1]]
        if apart is not None:  # the query's entry, then the item's chunks' scores
            entries = entries[1:]
        elif info.similarity:  # the query's entry, then the item's
            embedded = torch.from_numpy(entries).float()
            out.append(similarity(embedded[:1], embedded[1:2], scorer.spec.similarity).double().numpy())
            continue
        if prepared.chunks is not None:
            entries = aggregate(
                entries, entries[:, scorer.spec.positive_index], prepared.chunks, scorer.chunking.aggregate
            )
        out.append(entries[0])
    return np.stack(out) if out else np.zeros((0, len(scorer.spec.label_names)))


def _decoder(scorer, seqs) -> tuple[np.ndarray, np.ndarray]:
    """(entries, [entries, labels]): each entry (chunk) alone, P + its tokens, through the model's
    own forward."""

    singles, index = [], []
    for s in seqs:
        starts = np.cumsum(s.item_lens) - s.item_lens
        for j, (start, n) in enumerate(zip(starts, s.item_lens)):
            at = s.prefix_len + int(start)
            singles.append(np.concatenate([s.input_ids[: s.prefix_len], s.input_ids[at : at + int(n)]]).tolist())
            index.append(int(s.item_index[j]))
    refs = _references(scorer, singles)
    return np.array(index), np.stack([r[0] for r in refs])


@torch.inference_mode()
def _pairs(scorer, seqs) -> tuple[np.ndarray, np.ndarray]:
    """Each pair (chunk) through the cross-encoder's own forward, its classifier included."""

    model, device = scorer.loaded.model, scorer.loaded.device
    out = []
    for s in seqs:
        ids = torch.as_tensor(s.input_ids[None], device=device)
        kwargs = {"attention_mask": torch.ones_like(ids)}
        if s.token_type_ids is not None:
            kwargs["token_type_ids"] = torch.as_tensor(s.token_type_ids[None], device=device)
        logits = model(input_ids=ids, **kwargs).logits[0]
        out.append(activate(logits, scorer.spec.activation).double().cpu().numpy())
    return np.array([int(s.item_index[0]) for s in seqs]), np.stack(out)


def _texts(scorer, seqs) -> tuple[np.ndarray, np.ndarray]:
    """Each text (the query's, the item's) embedded alone by the model's own forward."""

    embedded = _embedding_references(scorer, [s.input_ids for s in seqs], [s.prefix_len for s in seqs])
    return np.array([int(s.item_index[0]) for s in seqs]), embedded.double().numpy()
