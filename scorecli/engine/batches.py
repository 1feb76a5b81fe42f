"""A window's batch results, gathered where they are computed and read back once.

A `.cpu()` per batch makes the host wait for the device after every batch: the GPU then idles
while the next batch is collated, planned and launched. Here results stay on the device until
the window ends (one copy back, `gather`); progress is reported as CUDA events complete, never
by waiting. On the CPU results are already on the host and progress is reported at once.
Knows nothing about kinds, attention or files.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
import torch


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
