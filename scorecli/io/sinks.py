"""Where a run's windows go: one `Sink` protocol for every kind of output.

- `writers.FileSink`: a file (written under a temporary name and renamed), an object in a store
  (uploaded whole at the end), stdout or a device/FIFO (streamed window by window);
- `engine.checkpoint.PartsSink`: windows kept as durable parts (`<out>.partial/` or a dataset
  folder, on a local disk or under a store's prefix) that become the output at the end.
The run lifecycle (`engine.lifecycle`) opens one sink per run (`open_sink`, or the checkpoint's)
and knows nothing else about where its output goes (docs/ARCHITECTURE.md). Knows nothing about
models.
"""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa

from scorecli.io.output import Target
from scorecli.io.writers import FileSink


class Sink(Protocol):
    """A run's output: windows in input order, then `close` (the output appears whole) or `abort`
    (nothing appears that was not there; what a checkpoint keeps stays kept).

    Attributes:
        out: the output as the summary names it.
        nulled: per column, the NaN/infinite values written as null.
        streamed: the rows handed to the output's reader already, window by window (JSON lines
            on stdout, a device, a FIFO; the last maybe in part); 0 for an output that appears
            whole or not at all.
    """

    out: str
    nulled: dict[str, int]
    streamed: int

    def write(self, table: pa.Table) -> None: ...
    def close(self, metadata: dict[str, str] | None = None) -> None:
        """Make the output appear; `metadata`: keys known only at the end (ranking metrics, the
        score cache's counts, the audit), added to (or replacing) the output's metadata."""
        ...

    def abort(self) -> None: ...


def open_sink(target: Target, metadata: dict[str, str]) -> Sink:
    """The sink that writes `target` straight through (no parts): a file, an object, a stream."""
    return FileSink(target, metadata)
