"""A window's batches run back to back (`run_serial`: a batch that runs out of device memory is
retried as two halves; `run_streams`: CPU threads that split torch's threads between them), and
their results gathered where they are computed and read back once (`Readback`).

A `.cpu()` per batch makes the host wait for the device after every batch: the GPU then idles
while the next batch is collated, planned and launched. Here results stay on the device until
the window ends (one copy back, `gather`); progress is reported as CUDA events complete, never
by waiting. On the CPU results are already on the host and progress is reported at once.
Knows nothing about kinds, attention or files: what scores a batch, and what to do when one
fails, are the `Scorer`'s.
"""

from __future__ import annotations

import queue
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from scorecli.core.batching import Batch, collate
from scorecli.core.pack import Seq

# what a window's batches give, in plan order: (entry index, tokens, result [N, width] on the device)
Scored = Iterator[tuple[np.ndarray, int, torch.Tensor]]


class Readback:
    """Collects `(entry index, tokens, result)` of a window's batches; `gather` reads them back.

    Args:
        device: where the results are computed.
        on_batch: progress, `on_batch(items, tokens)` once a batch is done (None: none).
        done: [entries] bool, the entries whose batch completes an item (None: every entry).
    """

    def __init__(
        self, device: torch.device, on_batch: Callable[[int, int], None] | None, done: np.ndarray | None = None
    ) -> None:
        self.device, self.on_batch, self.done = device, on_batch, done
        self.index: list[np.ndarray] = []
        self.values: list[torch.Tensor] = []
        self.waiting: deque[tuple[torch.cuda.Event, int, int]] = deque()

    def add(self, index: np.ndarray, tokens: int, values: torch.Tensor) -> None:
        """A batch's results [len(index), width] (still being computed, on a GPU)."""
        self.index.append(index)
        self.values.append(values)
        if self.on_batch is None:
            return
        items = len(index) if self.done is None else int(self.done[index].sum())
        if values.device.type != "cuda":
            self.on_batch(items, tokens)
            return
        event = torch.cuda.Event()
        event.record()
        self.waiting.append((event, items, tokens))
        self._report(wait=False)

    def _report(self, wait: bool) -> None:
        """Progress for the batches whose event has completed (all of them, waiting, if `wait`)."""
        while self.waiting and (wait or self.waiting[0][0].query()):
            event, items, tokens = self.waiting.popleft()
            event.synchronize()
            if self.on_batch is not None:
                self.on_batch(items, tokens)

    def gather(self, entries: int, width: int) -> np.ndarray:
        """[entries, width] float32: every batch's rows at their entries (one copy to the host)."""
        out = np.zeros((entries, width), dtype=np.float32)
        if self.values:
            flat = torch.cat([v.float() for v in self.values]).cpu().numpy()  # the window's one wait
            out[np.concatenate(self.index)] = flat
        self._report(wait=True)
        self.index, self.values = [], []
        return out


def run_serial(
    seqs: list[Seq],
    batches: list[np.ndarray],
    shared: int,
    score: Callable[[Batch], torch.Tensor],
    switch: Callable[[Exception], bool],
    device: torch.device,
) -> Scored:
    """Every batch of `batches` (index arrays into `seqs`, which continue a prefix of `shared`
    tokens) scored by `score` on `device`, one at a time. A batch that runs out of device memory is
    retried as two halves; one that fails otherwise is retried once `switch(error)` has switched
    what scores it (False: nothing to switch to, the error stands)."""
    pending = list(reversed(batches))
    while pending:
        index = pending.pop()
        batch = collate([seqs[i] for i in index], shared)
        try:
            result = score(batch)
        except torch.OutOfMemoryError:
            if len(index) == 1:
                raise
            half = len(index) // 2
            warnings.warn(f"out of memory on a batch of {len(index)} sequences; retrying as two halves", stacklevel=2)
            free_cache(device)
            pending += [index[half:], index[:half]]
            continue
        except Exception as err:
            if not switch(err):
                raise
            pending.append(index)
            continue
        yield batch.item_index, batch.num_tokens, result


def run_streams(
    seqs: list[Seq],
    batches: list[np.ndarray],
    shared: int,
    score: Callable[[Batch, object], torch.Tensor],
    streams: Sequence,
) -> Scored:
    """`run_serial`'s results, in plan order, computed by the forwards `streams` (`score(batch,
    forward)`) in threads that split torch's CPU threads between them."""
    threads = torch.get_num_threads()
    free: queue.SimpleQueue = queue.SimpleQueue()
    for forward in streams:
        free.put(forward)

    def run(index: np.ndarray) -> tuple[np.ndarray, int, torch.Tensor]:
        forward = free.get()
        try:
            batch = collate([seqs[i] for i in index], shared)
            return batch.item_index, batch.num_tokens, score(batch, forward)
        finally:
            free.put(forward)

    per_stream = max(1, threads // len(streams))
    try:
        with ThreadPoolExecutor(len(streams), "scorecli-stream", torch.set_num_threads, (per_stream,)) as pool:
            yield from pool.map(run, batches)
    finally:
        torch.set_num_threads(threads)


def free_cache(device: torch.device) -> None:
    """Give the device memory torch keeps cached back (after a batch ran out of it)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
