"""The pipeline keeps the device fed: host work hides behind a stand-in forward of fixed duration,
and a window's results come back in one copy, not one per batch.

The stand-in forward sleeps (as a host waiting for a GPU does: the GIL is free) and the host
work holds the GIL (as tokenizing and packing do), so the overlap measured here is the one a GPU
run gets. Intervals are recorded and compared, with a generous margin on the wall time.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import torch

from scorecli import Scorer
from scorecli.engine.local import score_stream
from scorecli.io.readers import RawRow
from tests.test_invariance import make_rows

DEVICE_S = 0.1  # per batch
HOST_S = 0.4  # per window, on top of the real preparation


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:  # holds the GIL, as Python packing does
        pass


def test_host_work_hides_behind_the_device(qwen3_seq_cls, monkeypatch):
    """Each window's preparation (held GIL) runs while the previous window's forwards (a fixed
    sleep each) run: the pipelined stream saves about the hidden host time over the same stream
    preparing each window only when needed."""
    rows = [RawRow(r, f"t:{k + 1}") for k, r in enumerate(make_rows(30, seed=3, max_items=4))]
    scorer = Scorer(qwen3_seq_cls, window_rows=6, max_batch_tokens=120, self_check=False)
    host, device, lock = [], [], threading.Lock()
    prepare = scorer.prepare

    def slow_prepare(window, *args, **kwargs):
        start = time.perf_counter()
        out = prepare(window, *args, **kwargs)
        _busy(HOST_S)
        with lock:
            host.append((start, time.perf_counter()))
        return out

    def timed_forward(batch, forward=None):
        """A forward of fixed duration that leaves the CPU to the host (as a GPU does)."""
        start = time.perf_counter()
        time.sleep(DEVICE_S)
        with lock:
            device.append((start, time.perf_counter()))
        return torch.zeros((len(batch.item_index), scorer.family.entry_width))

    monkeypatch.setattr(scorer, "prepare", slow_prepare)
    monkeypatch.setattr(scorer.family, "score_batch", timed_forward)
    walls = {}
    for prefetch in (False, True):
        host.clear()
        device.clear()
        start = time.perf_counter()
        tables = [t for _, t in score_stream(scorer, iter(rows), prefetch=prefetch)]
        walls[prefetch] = time.perf_counter() - start
        assert len(tables) == 5 and len(device) >= 10
    hidden = min(sum(b - a for a, b in host[1:]), sum(b - a for a, b in device))
    # windows 2..5 were prepared while the forwards ran: their host time overlaps device time
    overlap = sum(max(0.0, min(b, d) - max(a, c)) for a, b in host[1:] for c, d in device)
    assert overlap > 0.6 * sum(b - a for a, b in host[1:]), (overlap, host, device)
    assert walls[True] < walls[False] - 0.5 * hidden, (walls, hidden)


def test_one_copy_back_per_window(qwen3_seq_cls, monkeypatch):
    """Batch results stay where they were computed until the window ends (`engine.batches`)."""
    rows = [RawRow(r, f"t:{k + 1}") for k, r in enumerate(make_rows(12, seed=4, max_items=5))]
    scorer = Scorer(qwen3_seq_cls, max_batch_tokens=60, self_check=False)
    prepared = scorer.prepare(rows)
    assert len(prepared.batches) >= 4
    calls = []
    real_cpu = torch.Tensor.cpu
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self, *a, **k: calls.append(self.shape) or real_cpu(self, *a, **k))
    progress = []
    table = scorer.run(prepared, on_batch=lambda items, tokens: progress.append(items))
    monkeypatch.undo()
    assert len(calls) == 1, calls  # one readback for all the window's batches
    assert len(progress) == len(prepared.batches) and sum(progress) == prepared.num_items
    expected = Scorer(qwen3_seq_cls, self_check=False).score_rows(rows)
    np.testing.assert_allclose(
        np.concatenate([np.ravel(s) for s in table["scores"].to_pylist() if s]),
        np.concatenate([np.ravel(s) for s in expected["scores"].to_pylist() if s]),
        atol=1e-5,
    )
