"""The score cache (docs/long-jobs.md: Nightly jobs; docs/ARCHITECTURE.md: Score cache): pairs already scored
are not scored again, in a job or across jobs.

- `keys`: a pair's 128-bit key: the settings that decide its score, its query part and its item;
- `identity`: those settings as digests (the model by the content of its files);
- `segments`, `store`: sorted, checksummed, immutable segment files in a local folder or under a
  store's prefix, and how they are added, merged and pruned;
- `index`: looking a window's keys up in the segments and in the job's own entries;
- `window`: a window's pairs split into hits, pairs to score and repeats, and merged back;
- `reuse`: `Reusing`, the Scorer behind all that, which the engines score windows with;
- `admin`: `scorecli cache info` and `scorecli cache prune`.
Knows nothing about output files, progress or the command line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# files of a cache's folder (`store`) that an input glob could list (`*.json`): its marker and records;
# its segments are `.arrow`, which no input reads
FILES = ("scorecli-score-cache.json", "requests/0.json", "models/0.json")


def reusing(cfg, load: Callable[[], Any]):
    """The `reuse.Reusing` a run scores its windows with: `cfg.score_cache` opened (made if
    missing), `load()` building the Scorer when one is needed."""
    from scorecli.cache.reuse import Reusing
    from scorecli.cache.store import CacheStore

    cache = CacheStore(cfg.score_cache, create=True) if cfg.score_cache else None
    return Reusing(cfg, load, cache)
