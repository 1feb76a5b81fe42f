"""One run at a time per folder: an exclusive `flock` on the directory itself.

A run holds the folder of its parts (`io.parts`) while it uses it; another process asking for
the same folder is refused at once (`Busy`, a usage error: exit 2). The lock lives as long as
the descriptor: a killed run never leaves a stale one, and nothing is written to hold it.
Stores of one process share the lock (library use may open a job's store twice).
Knows nothing about parts, jobs or runs.
"""

from __future__ import annotations

import os

from scorecli.errors import UsageError


class Busy(UsageError):
    """Another run is writing the folder now."""


_HELD: dict[str, list[int]] = {}  # folders this process holds: real path -> [locked descriptor, holders]


def hold(folder: str) -> str:
    """Hold `folder` for this process: an exclusive, non-blocking `flock` on the directory,
    kept until every holder has called `release` (stores of one process share it). Where the
    file system has no flock, nothing is held and nothing refused. Returns the key to release.

    Raises:
        Busy: another process holds it.
    """
    key = os.path.realpath(folder)
    if key in _HELD:
        _HELD[key][1] += 1
        return key
    fd = os.open(folder, os.O_RDONLY)
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Busy(f"another scorecli run is writing {folder} now: wait for it to end, or give another --out") from None
    except (ImportError, OSError):  # not POSIX, or a file system without flock
        pass
    _HELD[key] = [fd, 1]
    return key


def release(key: str | None) -> None:
    """One holder of `key` (from `hold`) is done; the last one closes the descriptor, which
    drops the lock."""
    held = _HELD.get(key) if key else None
    if held is not None:
        held[1] -= 1
        if held[1] == 0:
            del _HELD[key]
            os.close(held[0])
