"""Sort sequences by length and cut them into batches under a token budget.

Numpy only. The canonical layout of a batch is ragged (sequences concatenated, with
`cu_seqlens`); a padded view is derived on demand for backends that need one, and those
backends pay for their padding in the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scorecli.core.pack import Seq, segment_ids


@dataclass(frozen=True, slots=True)
class Batch:
    """Ragged batch of sequences, with everything needed to mask and pool."""

    input_ids: np.ndarray  # [T] int64
    position_ids: np.ndarray  # [T] int64
    segment: np.ndarray  # [T] int64: 0 prefix, k for the k-th item of its sequence
    cu_seqlens: np.ndarray  # [S+1] int64
    prefix_lens: np.ndarray  # [S] int64
    item_lens: np.ndarray  # [N] int64, sequence-major
    item_counts: np.ndarray  # [S] int64: items per sequence
    item_start: np.ndarray  # [N] int64: first token of each item within its sequence
    pool_index: np.ndarray  # [N] int64: ragged index of the token each item is read at
    first_index: np.ndarray  # [N] int64: ragged index of the first token of each item's sequence
    item_index: np.ndarray  # [N] int64: window-global item index
    token_type_ids: np.ndarray | None = None  # [T]
    shared_len: int = 0  # tokens of a shared prefix every sequence continues (`pack.drop_shared`)

    @property
    def num_seqs(self) -> int:
        return int(self.cu_seqlens.shape[0] - 1)

    @property
    def seq_lens(self) -> np.ndarray:
        return np.diff(self.cu_seqlens)

    @property
    def num_tokens(self) -> int:
        return int(self.cu_seqlens[-1])

    @property
    def max_len(self) -> int:
        return int(self.seq_lens.max())

    def padded_index(self) -> np.ndarray:
        """[T] flat index of every ragged token in a [S, max_len] padded layout."""
        lens = self.seq_lens
        row = np.repeat(np.arange(self.num_seqs, dtype=np.int64), lens)
        col = np.arange(self.num_tokens, dtype=np.int64) - np.repeat(self.cu_seqlens[:-1], lens)
        return row * self.max_len + col


def collate(seqs: list[Seq], shared_len: int = 0) -> Batch:
    """Concatenate sequences into one ragged batch.

    Each item is read at its last token, or at the prefix's last token when it is empty.
    `shared_len`: the sequences continue a shared prefix of that many tokens, which attention
    sees as keys before every sequence (their own positions already count it).
    """
    lens = np.array([s.length for s in seqs], dtype=np.int64)
    cu = np.concatenate([[0], np.cumsum(lens)])
    prefix_lens = np.array([s.prefix_len for s in seqs], dtype=np.int64)
    item_lens = np.concatenate([s.item_lens for s in seqs])
    counts = np.array([len(s.item_lens) for s in seqs], dtype=np.int64)
    seq_start = np.repeat(cu[:-1], counts)  # [N]
    item_prefix = np.repeat(prefix_lens, counts)  # [N] each item's sequence's prefix length
    item_start = item_prefix + _exclusive_cumsum_per_group(item_lens, counts)
    offset = np.where(item_lens > 0, item_start + item_lens - 1, item_prefix - 1)
    # a sequence's first token: the prefix's, or each item's own where there is no prefix (no BOS,
    # an empty query), as the item's sequence alone would start (an empty item there has none:
    # rows refuse it, and its index stays in the sequence)
    first = np.where((item_prefix > 0) | (item_lens == 0), 0, item_start)
    types = [s.token_type_ids for s in seqs]
    return Batch(
        input_ids=np.concatenate([s.input_ids for s in seqs]),
        position_ids=np.concatenate([s.position_ids for s in seqs]),
        segment=np.concatenate([segment_ids(s.prefix_len, s.item_lens) for s in seqs]),
        cu_seqlens=cu,
        prefix_lens=prefix_lens,
        item_lens=item_lens,
        item_counts=counts,
        item_start=item_start,
        pool_index=seq_start + offset,
        first_index=seq_start + first,
        item_index=np.concatenate([s.item_index for s in seqs]),
        token_type_ids=None if types[0] is None else np.concatenate(types),
        shared_len=shared_len,
    )


def _exclusive_cumsum_per_group(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Cumulative sum of `values` restarting at 0 at the start of each group."""
    total = np.cumsum(values) - values
    group_first = np.repeat(np.cumsum(counts) - counts, counts)
    return total - total[group_first] if len(values) else total


def plan_batches(lengths: np.ndarray, max_batch_tokens: int, padded: bool, streams: int = 1) -> list[np.ndarray]:
    """Group sequence indices into batches, longest first, each within the token budget.

    A padded batch costs `count * longest`; a ragged one the sum of its lengths. A single
    sequence longer than the budget forms a batch of its own. With `streams` running batches
    at once (CPU streams, each taking the next batch as it frees), every window is cut into a
    multiple of `streams` batches of even cost, costliest first (`_even`): the budget's greedy
    cut leaves a small last batch, and a stream idle beside the other's large one at the end of
    every window (a 4-row window of 40 pairs of ~420 tokens was cut 4,4,4,4,4,4,5,5,5,1).
    Returns:
        Index arrays into `lengths`, in the order the batches should run.
    """
    batches = _greedy(lengths, max_batch_tokens, padded)
    if streams > 1 and len(lengths) > 1:
        batches = _even(lengths, batches, max_batch_tokens, padded, streams)
    return batches


def _even(
    lengths: np.ndarray, greedy: list[np.ndarray], max_batch_tokens: int, padded: bool, streams: int
) -> list[np.ndarray]:
    """The sequences, longest first, cut into a multiple of `streams` batches (the fewest from
    the budget's own count, that of the `greedy` cut, up, in steps) whose cuts fall nearest to
    equal shares of the cost and that keep every batch of two or more sequences within the
    budget; the batches costliest first, so that streams taking them in turn finish together.
    A sequence's share of a padded batch's cost is the longest of its batch in the greedy cut."""
    order = np.concatenate(greedy)  # longest first
    ordered = lengths[order]
    counts = np.array([len(b) for b in greedy])
    weight = np.repeat(ordered[np.cumsum(counts) - counts], counts) if padded else ordered
    total = np.cumsum(weight)
    n = len(order)
    want = -(-len(greedy) // streams) * streams
    while want < n:
        share = total[-1] * np.arange(1, want) / want
        after = np.searchsorted(total, share)  # the first sequence whose inclusion reaches the share
        before = np.where(after > 0, total[np.maximum(after - 1, 0)], 0)
        cuts = np.maximum(np.where(total[after] - share <= share - before, after + 1, after), 1)
        k = np.arange(want - 1)
        cuts = np.minimum(k + np.maximum.accumulate(cuts - k), n - want + 1 + k)  # increasing, none empty
        batches = np.split(order, cuts)
        cost = np.array([batch_cost(lengths[b], padded) for b in batches])
        if all(len(b) == 1 or c <= max_batch_tokens for b, c in zip(batches, cost)):
            return [batches[i] for i in np.argsort(-cost, kind="stable")]
        want += max(streams, want // 16 // streams * streams)  # the shares' cut went over the budget: more
    return [order[i : i + 1] for i in range(n)]  # one sequence a batch


def _greedy(lengths: np.ndarray, max_batch_tokens: int, padded: bool) -> list[np.ndarray]:
    """Longest first, a new batch whenever the next sequence would take this one over the budget."""
    order = np.argsort(-lengths, kind="stable")
    batches, current, cost_len, total = [], [], 0, 0
    for i in order:
        n = int(lengths[i])
        new_cost = (len(current) + 1) * max(cost_len, n) if padded else total + n
        if current and new_cost > max_batch_tokens:
            batches.append(np.array(current, dtype=np.int64))
            current, cost_len, total = [], 0, 0
        current.append(int(i))
        cost_len, total = max(cost_len, n), total + n
    if current:
        batches.append(np.array(current, dtype=np.int64))
    return batches


def batch_cost(lengths: np.ndarray, padded: bool) -> int:
    """Tokens a batch of these lengths costs against the budget."""
    return int(len(lengths) * lengths.max()) if padded else int(lengths.sum())
