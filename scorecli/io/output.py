"""Where `--out` points, decided once before any work: format, kind of file, the path written.

- `-` and `/dev/stdout`: JSON lines on standard output, streamed window by window.
- A device or FIFO (after following symlinks), or an open descriptor (`/dev/stderr`,
  `/dev/fd/3`, whatever it points to): written through, never replaced.
- A path ending in `/`, or an existing directory: a Parquet dataset (`scorecli.checkpoint`).
- Anything else: a regular file, written under a temporary name beside its real path (a
  symlink's target: the link stays) and renamed onto it at the end.
The format comes from the name as given: `.parquet` or no suffix: Parquet; `.jsonl`,
`.json`: JSON lines; `.jsonl.gz`: gzip-compressed JSON lines; any other suffix is refused.
Knows nothing about tables or models.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from dataclasses import dataclass

from scorecli.errors import UsageError

STDOUT = "-"
STDOUT_PATHS = (STDOUT, "/dev/stdout")
DESCRIPTORS = ("/dev/stderr", "/dev/fd/", "/proc/self/fd/")
# longest suffix first: `.jsonl.gz` before `.gz`
FORMATS = ((".jsonl.gz", "jsonl.gz"), (".parquet", "parquet"), (".jsonl", "jsonl"), (".json", "jsonl"))
SUPPORTED = "supported: .parquet (or no suffix), .jsonl, .json, .jsonl.gz, or - for JSON lines on stdout"


@dataclass(frozen=True)
class Target:
    """A resolved `--out`.

    Attributes:
        out: the path as the user gave it (for messages).
        format: "parquet", "jsonl" or "jsonl.gz".
        kind: "stdout", "special" (a device or FIFO: written through), "file", or "dataset"
            (a directory of Parquet parts, `scorecli.checkpoint`).
        path: the file written (symlinks resolved); None for stdout.
    """

    out: str
    format: str
    kind: str
    path: str | None


def output_format(out: str) -> str:
    """"jsonl" for stdout, else the format the name's suffix says; UsageError for others."""
    if out in STDOUT_PATHS:
        return "jsonl"
    name = os.path.basename(out).lower()
    for suffix, fmt in FORMATS:
        if name.endswith(suffix) and len(name) > len(suffix):
            return fmt
    suffix = os.path.splitext(name)[1]
    if suffix and suffix != ".":
        raise UsageError(f"unsupported output format: {out} ({SUPPORTED})")
    return "parquet"


def resolve_output(out: str, inputs: list[str] | tuple[str, ...] = ()) -> Target:
    """Check `out` before any work and say how it will be written.

    Args:
        out: the `--out` value.
        inputs: resolved input paths (`-` for stdin); `out` may not be one of them.

    Raises:
        UsageError: empty, unsupported suffix, a missing or unwritable
            directory, a read-only file, a socket, or one of the inputs.
    """
    if not out:
        raise UsageError("--out: empty path (give a .parquet or .jsonl path, or - for stdout)")
    if out not in STDOUT_PATHS and (out.endswith(("/", os.sep)) or os.path.isdir(out)):
        return _dataset(out)
    fmt = output_format(out)
    if out in STDOUT_PATHS:
        if sys.stdout is None:  # started with stdout closed (`>&-`)
            raise UsageError(f"cannot write output {out}: standard output is closed")
        return Target(out, fmt, "stdout", None)
    real = os.path.realpath(out)
    # /dev/stderr, /dev/fd/3: an open descriptor, whatever it points to (a file the shell holds open)
    descriptor = real.startswith("/proc/") or os.path.abspath(out).startswith(DESCRIPTORS)
    if descriptor:
        real = out
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise UsageError(f"cannot write output {out}: {e.strerror or e}") from e
    reason = _unwritable(real, st)
    if reason is None:
        reason = _same_as_input(real, st, inputs)
    if reason:
        raise UsageError(f"cannot write output {out}: {reason}")
    kind = "file" if not descriptor and (st is None or stat.S_ISREG(st.st_mode)) else "special"
    return Target(out, fmt, kind, real)


def _dataset(out: str) -> Target:
    """A directory `--out`: a Parquet dataset of part files (`scorecli.checkpoint`)."""
    real = os.path.realpath(out)
    if os.path.exists(real) and not os.path.isdir(real):
        raise UsageError(f"cannot write output {out}: not a directory")
    parent = real if os.path.isdir(real) else os.path.dirname(real)
    if not os.path.isdir(parent):
        raise UsageError(f"cannot write output {out}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write output {out}: directory {parent} is not writable")
    return Target(out, "parquet", "dataset", real)


def unwritable_file(path: str) -> str | None:
    """Why the regular file `path` cannot be made or replaced (its directory missing or
    read-only, a read-only file, a directory, a socket), or None when it can."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as e:
        return e.strerror or str(e)
    return _unwritable(real, st)


def _unwritable(real: str, st: os.stat_result | None) -> str | None:
    if st is not None and stat.S_ISDIR(st.st_mode):
        return "is a directory"
    if st is not None and stat.S_ISSOCK(st.st_mode):
        return "is a socket"
    if st is not None and not stat.S_ISREG(st.st_mode):
        return None if os.access(real, os.W_OK) else "not writable"
    # root may write anything: a file without any write bit is read-only all the same
    if st is not None and (not os.access(real, os.W_OK) or not st.st_mode & 0o222):
        return "the file is read-only"
    parent = os.path.dirname(real)
    if not os.path.isdir(parent):
        return f"directory {parent} does not exist"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"directory {parent} is not writable"
    return None


def _same_as_input(real: str, st: os.stat_result | None, inputs) -> str | None:
    if st is None:
        return None
    for path in inputs:
        if path == STDOUT:
            continue
        try:
            other = os.stat(path)
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            return f"it is the input {path}"
    return None


def temp_path(path: str) -> str:
    """The temporary file beside `path` that is renamed onto it at commit."""
    head, base = os.path.split(path)
    return os.path.join(head, f".{base}.{os.getpid()}.tmp")


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
