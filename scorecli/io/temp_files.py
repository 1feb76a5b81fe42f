"""Temporary files beside an output and durable renames: a file is written under a temporary
name beside its real path (`temp_path`), locked for the life of the process that writes it (`lock`),
fsync'ed and renamed onto its path, and the rename made durable (`fsync_dir`); a killed run's
temporary files are removed by the next run that writes there (`clean_stale_temps`). Knows nothing
about formats, tables or where `--out` points (`io.output`).
"""

from __future__ import annotations

import os
import re
from typing import IO


def temp_path(path: str) -> str:
    """The temporary file beside `path` that is renamed onto it at commit."""
    head, base = os.path.split(path)
    return os.path.join(head, f".{base}.{os.getpid()}.tmp")


def create(path: str) -> IO[bytes]:
    """The temporary file at `path`, made new (mode as the umask gives): whatever is there is removed
    first (a file an earlier process of the same PID left, as in a container; a symlink planted in a
    shared folder, which opening the name would follow, writing over the file it points to and
    renaming the link onto the output), and the file is made with O_EXCL, which follows no link."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666), "w+b")


def clean_stale_temps(path: str) -> list[str]:
    """Remove temporary files that killed runs (SIGKILL, power loss) left beside `path`.

    A temporary file is stale when the process named in it is gone and no process holds
    its lock (a live run keeps an exclusive `flock` on its own). Returns the paths removed.
    """
    head, base = os.path.split(path)
    pattern = re.compile(rf"\.{re.escape(base)}\.(\d+)\.tmp")
    removed = []
    try:
        names = os.listdir(head)
    except OSError:
        return removed
    for name in names:
        match = pattern.fullmatch(name)
        if match and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1))):
            candidate = os.path.join(head, name)
            if _unlink_if_unlocked(candidate):
                removed.append(candidate)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, someone else's
        return True
    return True


def lock(fd: int) -> None:
    """Hold an exclusive lock on an open temporary file for the life of the process."""
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (ImportError, OSError):  # no flock here: the PID check alone decides
        pass


def _unlink_if_unlocked(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:
        pass
    except OSError:  # locked: a live run on another host or in another PID namespace
        os.close(fd)
        return False
    try:
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """Make renames in `path` durable; not every platform lets a directory be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
