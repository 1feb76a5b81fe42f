"""Packing and batching: positions, segments, pool indices, splitting, truncation, budgets."""

from __future__ import annotations

import numpy as np
import pytest

from scorecli.core.batching import batch_cost, collate, plan_batches
from scorecli.core.pack import EncodedRow, drop_shared, pack_row, shared_prefix_len, truncate_items
from scorecli.errors import InputError


def _row(prefix_len, item_lens, suffix_len=0):
    rng = np.random.default_rng(prefix_len * 31 + len(item_lens))
    return EncodedRow(rng.integers(10, 100, prefix_len), [rng.integers(10, 100, n) for n in item_lens], suffix_len)


def test_mis_positions_restart_per_item():
    seq = pack_row(_row(3, [2, 1, 3]), first_item=10, mis=True, max_seq_len=100)[0]
    assert seq.position_ids.tolist() == [0, 1, 2, 3, 4, 3, 3, 4, 5]
    assert seq.item_index.tolist() == [10, 11, 12]
    batch = collate([seq])
    assert batch.segment.tolist() == [0, 0, 0, 1, 1, 2, 3, 3, 3]
    assert batch.pool_index.tolist() == [4, 5, 8]


def test_single_mode_one_item_per_sequence():
    row = _row(4, [2, 5])
    seqs = pack_row(row, first_item=0, mis=False, max_seq_len=100)
    assert [s.length for s in seqs] == [6, 9]
    assert all(s.position_ids.tolist() == list(range(s.length)) for s in seqs)
    np.testing.assert_array_equal(seqs[1].input_ids, np.concatenate([row.prefix, row.items[1]]))


def test_empty_item_pools_at_prefix_end():
    batch = collate(pack_row(_row(3, [2, 0, 1]), 0, mis=True, max_seq_len=100))
    assert batch.pool_index.tolist() == [4, 2, 5]


def test_split_rows_repeat_the_prefix_and_keep_item_order():
    row = _row(5, [4, 4, 4, 4, 4])
    seqs = pack_row(row, 0, mis=True, max_seq_len=14)
    assert [s.item_index.tolist() for s in seqs] == [[0, 1], [2, 3], [4]]
    for s in seqs:
        np.testing.assert_array_equal(s.input_ids[:5], row.prefix)
        assert s.length <= 14


def test_truncation_keeps_the_template_suffix():
    row = _row(4, [20, 3], suffix_len=3)
    cut = truncate_items(row, max_seq_len=12, truncate="item", where="f:1")
    assert [len(i) for i in cut.items] == [8, 3]
    np.testing.assert_array_equal(cut.items[0][:5], row.items[0][:5])
    np.testing.assert_array_equal(cut.items[0][-3:], row.items[0][-3:])
    assert cut.items[1] is row.items[1]


def test_truncate_error_names_row_and_item():
    with pytest.raises(InputError, match=r"f:7: field 'items'\[1\].*max-seq-len 12"):
        truncate_items(_row(4, [3, 20]), max_seq_len=12, truncate="error", where="f:7")
    with pytest.raises(InputError, match="no room"):
        truncate_items(_row(12, [3], suffix_len=1), max_seq_len=12, truncate="item", where="f:1")


def test_empty_query_and_empty_item_is_an_error():
    """The prefix is empty (an empty query, or a template file whose prefix holds no `{query}`):
    the message said 'after an empty query' to a row whose query was not empty."""
    row = EncodedRow(np.zeros(0, dtype=np.int64), [np.array([5]), np.zeros(0, dtype=np.int64)])
    with pytest.raises(InputError, match=r"'items'\[1\]: an empty item after an empty prefix \(the query as"):
        truncate_items(row, 10, "item", "f:2")
    ids = EncodedRow(row.prefix, row.items, names=("query_ids", "item_ids"))  # pre-tokenized: no template
    with pytest.raises(InputError, match=r"'item_ids'\[1\]: an empty item after an empty prefix \(no query ids\)"):
        truncate_items(ids, 10, "item", "f:2")


@pytest.mark.parametrize("padded", [True, False])
def test_batches_never_exceed_budget(padded):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, 500)
    budget = 1024
    batches = plan_batches(lengths, budget, padded)
    seen = np.sort(np.concatenate(batches))
    np.testing.assert_array_equal(seen, np.arange(500))
    for b in batches:
        assert batch_cost(lengths[b], padded) <= budget
        assert list(lengths[b]) == sorted(lengths[b], reverse=True)


def _finish(costs: list[int], streams: int = 2) -> int:
    """When the last of `streams` streams that take the batches in turn, each as it frees, ends."""
    ends = [0] * streams
    for cost in costs:
        ends[ends.index(min(ends))] += cost
    return max(ends)


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("count", [1, 2, 7, 20, 40, 60, 200, 400])
@pytest.mark.parametrize("spread", [(20, 140), (360, 460), (1, 600)])
def test_windows_are_even_across_streams(padded, count, spread):
    """CPU streams take a window's batches two at a time, each as it frees: every window is cut
    into a multiple of the streams, of even cost, costliest first, within the budget, every
    sequence once (a growing job's 2-row window was 14 pairs of 140 tokens beside 6 of 64; its
    4-row window of 40 pairs of ~420 tokens 4,4,4,4,4,4,5,5,5,1 pairs: one stream idle at the end)."""
    rng = np.random.default_rng(count)
    lengths = rng.integers(*spread, count)
    budget = 2048
    greedy, even = plan_batches(lengths, budget, padded), plan_batches(lengths, budget, padded, streams=2)
    np.testing.assert_array_equal(np.sort(np.concatenate(even)), np.arange(count))
    assert all(len(b) == 1 or batch_cost(lengths[b], padded) <= budget for b in even)
    for b in even:
        assert list(lengths[b]) == sorted(lengths[b], reverse=True)
    costs = [batch_cost(lengths[b], padded) for b in even]
    assert costs == sorted(costs, reverse=True)
    if count > 1:
        assert len(even) % 2 == 0
        assert len(even) <= 1.25 * len(greedy) + 2  # not many more, smaller batches
        work = sum(costs) / 2  # the streams' share if both end together
        assert _finish(costs) <= work + 0.35 * max(costs)  # neither waits long on the other
        assert _finish(costs) <= _finish([batch_cost(lengths[b], padded) for b in greedy])


def test_a_window_of_equal_pairs_ends_on_both_streams_at_once():
    """10 pairs of 420 tokens, 4 a batch at most: 3,3,2,2 (the budget's smallest cut gave 3,3,3,1)."""
    batches = plan_batches(np.full(10, 420), 2048, padded=True, streams=2)
    assert [len(b) for b in batches] == [3, 3, 2, 2]


def test_oversized_sequence_gets_its_own_batch():
    batches = plan_batches(np.array([5, 50, 5]), max_batch_tokens=20, padded=False)
    assert [b.tolist() for b in batches] == [[1], [0, 2]]


def test_padded_index_maps_ragged_to_padded():
    batch = collate(pack_row(_row(2, [1]), 0, False, 100) + pack_row(_row(1, [3]), 1, False, 100))
    # lengths 3 and 4, max_len 4
    assert batch.padded_index().tolist() == [0, 1, 2, 4, 5, 6, 7]


def test_shared_prefix_len_leaves_every_row_a_token():
    a, b = np.array([1, 2, 3, 4, 5]), np.array([1, 2, 3, 9])
    assert shared_prefix_len([a, b]) == 3
    assert shared_prefix_len([a, a.copy()]) == 4  # identical prefixes: the last token stays
    assert shared_prefix_len([a, b, np.array([1, 2])]) == 1
    assert shared_prefix_len([a, np.array([7, 2, 3])]) == 0
    assert shared_prefix_len([a]) == 0 and shared_prefix_len([]) == 0  # nothing to share with
    assert shared_prefix_len([a, np.array([], dtype=np.int64)]) == 0


def test_drop_shared_keeps_positions_and_items():
    for mis in (True, False):
        for seq in pack_row(_row(6, [2, 0, 3]), first_item=4, mis=mis, max_seq_len=100):
            cut = drop_shared(seq, 4)
            np.testing.assert_array_equal(cut.input_ids, seq.input_ids[4:])
            np.testing.assert_array_equal(cut.position_ids, seq.position_ids[4:])
            assert cut.prefix_len == 2 and cut.item_lens.tolist() == seq.item_lens.tolist()
            batch = collate([cut], shared_len=4)
            assert batch.shared_len == 4 and batch.position_ids[0] == 4
            assert batch.pool_index.tolist() == (collate([seq]).pool_index - 4).tolist()
    with pytest.raises(ValueError):
        drop_shared(pack_row(_row(3, [2]), 0, True, 100)[0], 3)
