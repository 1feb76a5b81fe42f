"""Which runtime runs a batch, by its length: `--runtime auto`'s verdict (`runtimes.auto`) where
one runtime is faster on short sequences and the other on long ones.

A `Route` sends a batch whose longest sequence has at most `cut` tokens to its first runtime
and a longer one to its second (or every batch to its one runtime); `Routed` is the forward that
does so, over one forward of each runtime. A batch goes where its length says and nowhere else:
which rows share a batch is fixed by the job's windows, so a resumed job that keeps the route
scores every batch with the runtime the uninterrupted job would have.

Knows nothing about rows, files, kinds or how the verdict was measured; imports no torch.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

_TEXT = re.compile(r"([a-z0-9-]+)(?::(\d+):([a-z0-9-]+))?")


@dataclass(frozen=True)
class Route:
    """`first` for batches whose longest sequence has at most `cut` tokens, `second` for longer
    ones; `second` None: `first` for every batch (`cut` unused)."""

    first: str
    second: str | None = None
    cut: int = 0

    @property
    def name(self) -> str:
        """As the metadata's `runtime` says it: `onnx`, or `onnx+torch` (the short sequences' first)."""
        return self.first if self.second is None else f"{self.first}+{self.second}"

    @property
    def runtimes(self) -> tuple[str, ...]:
        return (self.first,) if self.second is None else (self.first, self.second)

    def runtime_for(self, length: int) -> str:
        """The runtime of a batch whose longest sequence has `length` tokens."""
        return self.first if self.second is None or length <= self.cut else self.second

    def text(self) -> str:
        """One word that `parse` reads back: `onnx`, or `onnx:230:torch`."""
        return self.first if self.second is None else f"{self.first}:{self.cut}:{self.second}"

    @classmethod
    def parse(cls, text: str) -> Route | None:
        """The route `text()` wrote; None for anything else."""
        match = _TEXT.fullmatch(text or "")
        if match is None:
            return None
        first, cut, second = match.groups()
        return cls(first) if second is None else cls(first, second, int(cut))

    @classmethod
    def from_metadata(cls, runtime: str | None, cut: str | None) -> Route | None:
        """The route of an output whose metadata says `runtime` (`name`) and `runtime_cut_tokens`."""
        names = (runtime or "").split("+")
        if len(names) == 1 and names[0]:
            return cls(names[0])
        if len(names) == 2 and all(names) and (cut or "").isdigit():
            return cls(names[0], names[1], int(cut or 0))
        return None


class Pending:
    """A runtime's forward not made yet (`make()` makes it): made when a window first has a batch
    for it (`Routed.open`), so that a job whose batches never go there never pays for it (torch's
    model, which a run on ONNX Runtime may not otherwise build: `model.remembered`)."""

    def __init__(self, make: Callable[[], Any]):
        self.make = make


class Routed:
    """A forward that runs each batch on the forward of the runtime its `route` picks for the
    batch's longest sequence (`forwards`: one per runtime of the route, called alike; a `Pending`
    one is made by `open` before a batch goes to it).

    `twin()` gives another over twins of each (a CPU stream's); `forced(name)` runs every batch
    on one runtime for a while, in this forward and all its twins (the self-check probes each).
    """

    def __init__(self, route: Route, forwards: dict[str, Any], _forced: list | None = None, _group: list | None = None):
        self.route, self.forwards = route, forwards
        self._forced = _forced if _forced is not None else [None]  # shared with the twins
        self._group: list[Routed] = _group if _group is not None else []  # this forward and its twins
        self._group.append(self)

    def twin(self) -> Routed:
        forwards = {name: f if isinstance(f, Pending) else f.twin() for name, f in self.forwards.items()}
        return Routed(self.route, forwards, self._forced, self._group)

    @property
    def pending(self) -> list[str]:
        """The runtimes whose forward is not made yet."""
        return [name for name, f in self.forwards.items() if isinstance(f, Pending)]

    def open(self, name: str, check: Callable[[Any], None]) -> None:
        """Make the pending forward of runtime `name`, in this forward and its twins, once
        `check(made)` has passed it (raises otherwise, leaving it pending)."""
        pending = self.forwards[name]
        if not isinstance(pending, Pending):
            return
        made = pending.make()
        check(made)
        for routed in self._group:
            routed.forwards[name] = made if routed is self else made.twin()

    def runtime_for(self, length: int) -> str:
        """The runtime a batch whose longest sequence has `length` tokens runs on (the forced one, if any)."""
        return self._forced[0] or self.route.runtime_for(length)

    def __call__(self, batch, *args):
        name = self.runtime_for(batch.max_len)
        forward = self.forwards[name]
        if isinstance(forward, Pending):  # `open` comes first, always
            raise RuntimeError(f"runtime {name} was not opened before a batch of {batch.max_len} tokens went to it")
        return forward(batch, *args)

    @contextlib.contextmanager
    def forced(self, name: str) -> Iterator[None]:
        saved, self._forced[0] = self._forced[0], name
        try:
            yield
        finally:
            self._forced[0] = saved


def each_runtime(forward) -> Iterator[str | None]:
    """Runs the caller's loop body once per runtime of a `Routed` forward that is made, each forced
    in turn (yielding its name); once, unforced, for any other forward (yielding None)."""
    if not isinstance(forward, Routed):
        yield None
        return
    for name in forward.forwards:
        if name in forward.pending:  # checked as it is opened (`Routed.open`)
            continue
        with forward.forced(name):
            yield name
