"""A window after the CPU stages (`Scorer.prepare`: rows validated, encoded, packed, repeats
taken out, batches planned): what `Scorer.values` runs and `io.columns.window_table` writes
from, and what the local engine prepares for the next window while this one runs
(`engine.local`). Data only: knows nothing about models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from scorecli.core.pack import Seq


@dataclass
class Prepared:
    """A window after the CPU stages: sequences, batch plan and per-row bookkeeping."""

    ids: list[Any]
    has_id: bool
    errors: list[str | None]
    item_offsets: np.ndarray  # [rows + 1] int64
    seqs: list[Seq]
    batches: list[np.ndarray]
    num_tokens: np.ndarray  # [rows] int64: tokens each row cost in the forward passes
    shared: np.ndarray  # [C] int64: prefix tokens every sequence continues (dropped from `seqs`)
    id_type: pa.DataType | None = None  # the id column's type when the input fixes it (Parquet)
    chunks: np.ndarray | None = None  # [items] int64: chunks each item is scored as (`--chunk-tokens`)
    num_entries: int = 0  # what the batches score: chunks of items (and embedded queries)
    labels: list[np.ndarray | None] | None = None  # each row's relevance grades; None: no row has any
    planned: Any = None  # what the family's `plan` hands back to it when the window runs (`begin`)
    copies: np.ndarray | None = None  # [2, k] entries not run, and the entry of the same sequence they copy

    @property
    def num_rows(self) -> int:
        return len(self.ids)

    @property
    def num_items(self) -> int:
        return int(self.item_offsets[-1])
