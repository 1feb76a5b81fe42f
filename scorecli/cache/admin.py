"""`scorecli cache info` and `scorecli cache prune` (docs/long-jobs.md: Nightly jobs): what a score cache holds,
per model, and removing what is no longer wanted.

`prune` removes the entries of a model (`--model`: a model as `--model` names it, hashed by its
files, or the start of an identity `info` shows) or added before an age (`--older-than 30d`; a
segment that holds both old and new entries is written again with the new ones), and always
tidies: damaged segments and temporary files killed writers left are removed, and a settings'
many segments merged. Knows nothing about rows or scoring.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict

import numpy as np

from scorecli.cache.identity import model_identity
from scorecli.cache.segments import Entries
from scorecli.cache.store import CacheStore, SegmentInfo
from scorecli.errors import UsageError

_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "": 86400}


def parse_age(text: str) -> float:
    """Seconds in `30d`, `12h`, `90m`, `2w`, `45s` or a plain number of days (UsageError otherwise)."""
    m = _AGE.match(text.strip().lower())
    if not m:
        raise UsageError(f"--older-than {text!r}: expected an age such as 30d, 12h, 90m or 2w")
    return float(m.group(1)) * _UNIT[m.group(2)]


def _count(n: int, one: str, many: str | None = None) -> str:
    """`1 segment`, `2 segments`: a count and its noun (`many`: a plural other than one + s)."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _day(t: str) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(int(t))) if t else "-"


def info(location: str) -> list[str]:
    """Lines about the cache at `location`: totals, then per model identity."""
    store = CacheStore(location, create=False)
    per_model: dict[tuple[str, str], list[SegmentInfo]] = defaultdict(list)
    damaged = 0
    for profile in store.profiles():
        for segment in store.infos(profile, verify=True):
            if isinstance(segment, SegmentInfo):
                key = (segment.meta.get("model_identity", ""), segment.meta.get("model_name", ""))
                per_model[key].append(segment)
            else:
                damaged += 1
    segments = [s for group in per_model.values() for s in group]
    lines = [
        f"score cache {store.shown}: {_count(sum(s.rows for s in segments), 'entry', 'entries')} in "
        f"{_count(len(segments), 'segment')}, {_mb(sum(s.size for s in segments))}"
    ]
    for (identity, name), group in sorted(per_model.items(), key=lambda kv: kv[0][1]):
        oldest = min((s.meta.get("oldest", "") for s in group if s.meta.get("oldest")), default="")
        newest = max((s.meta.get("newest", "") for s in group), default="")
        settings = _count(len({s.profile for s in group}), "set of settings", "sets of settings")
        lines.append(
            f"  model {identity[:16]} ({name}): {_count(sum(s.rows for s in group), 'entry', 'entries')}, "
            f"{settings}, {_count(len(group), 'segment')}, {_mb(sum(s.size for s in group))}, "
            f"added {_day(oldest)} to {_day(newest)}"
        )
    if damaged:
        lines.append(f"  {_count(damaged, 'damaged segment')} (passed over; scorecli cache prune removes them)")
    return lines


def _matches(model: str, store: CacheStore) -> str:
    """The identity (or its start) `--model` names: a hex start as `info` shows, else a model hashed."""
    if re.fullmatch(r"[0-9a-f]{8,32}", model):
        return model

    identity = model_identity(model, store.memo)
    if identity is None:
        raise UsageError(f"--model {model}: no local copy of the model to identify it by")
    return identity


def prune(location: str, model: str | None, older_than: str | None) -> str:
    """Prune the cache at `location`; one line says what was removed and what is kept."""
    cutoff = time.time() - parse_age(older_than) if older_than is not None else None  # "": refused, not ignored
    store = CacheStore(location, create=False)
    identity = _matches(model, store) if model else None
    removed = kept = segments_removed = tidied = 0
    for profile in store.profiles():
        for segment in store.infos(profile, verify=True):
            if not isinstance(segment, SegmentInfo):  # damaged: of no use to anyone
                store.delete(profile, segment[0])
                tidied += 1
                continue
            if identity and segment.meta.get("model_identity", "").startswith(identity):
                store.delete(profile, segment.name)
                removed, segments_removed = removed + segment.rows, segments_removed + 1
                continue
            if cutoff is not None and segment.meta.get("newest") and int(segment.meta["newest"]) < cutoff:
                store.delete(profile, segment.name)
                removed, segments_removed = removed + segment.rows, segments_removed + 1
                continue
            if cutoff is not None and segment.meta.get("oldest") and int(segment.meta["oldest"]) < cutoff:
                dropped = _drop_old(store, segment, cutoff)
                removed, kept = removed + dropped, kept + segment.rows - dropped
                continue
            kept += segment.rows
        tidied += store.tidy_temps("segments", profile)
        store.compact(profile)
    tidied += sum(store.tidy_temps(*where) for where in (("requests",), ("models",), ()))
    if identity:
        store.forget_requests(identity)
    what = f"removed {_count(removed, 'entry', 'entries')} ({_count(segments_removed, 'whole segment')})"
    return f"score cache {store.shown}: {what}, kept {kept:,}" + (
        f"; tidied {_count(tidied, 'damaged or temporary file')}" if tidied else ""
    )


def _drop_old(store: CacheStore, segment: SegmentInfo, cutoff: float) -> int:
    """Write `segment` again without its entries added before `cutoff`; how many went."""
    entries = store.read(segment.profile, segment.name, with_added=True)
    if entries is None:
        return 0
    keep = np.flatnonzero(entries.added >= cutoff)
    model = {"identity": segment.meta.get("model_identity", ""), "name": segment.meta.get("model_name", "")}
    if len(keep):
        store.write(segment.profile, Entries.take(entries, keep), model)
    store.delete(segment.profile, segment.name)
    return len(entries) - len(keep)
