"""Build a cached file or folder once, atomically: under a temporary name next to it, then
renamed into place, so a killed run never leaves half of it where the next run looks, and two
runs building it at once both end with one whole copy. What is built gets the modes the
process's umask gives (0644 and 0755 under umask 022, group-writable under 002), as any file
made in place would: a cache folder shared by a group stays readable by all of it.

A run killed while building (kill -9, a job's time limit, the machine's OOM killer) leaves its
temporary copy behind, and a dequantized checkpoint's is gigabytes: the next build in the same folder
removes the copies of runs that are gone. A temporary name holds its run's process id and a tag of
the process namespace and boot it belongs to, so a copy is taken for gone only where the process
could be seen: one of this namespace whose process is not running, or, of another machine or
container sharing the cache, one untouched for a day.

Shared by the dequantized GGUF checkpoints (`gguf`), the ONNX exports (`runtime_onnx`) and
their int8 copies (`runtime_int8`), the runtime verdicts and the remembered answers. Knows nothing
about what is built or how it is keyed.
"""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable

from scorecli.errors import UsageError

PREFIX = ".building-"
# files a cache folder holds that an input glob could list (`*.json`): `auto`'s runtime verdicts and a
# GGUF model's dequantized config and tokenizer (`io.output.check_unread`)
GLOBBED_FILES = ("runtime/0.json", "gguf/0/config.json")
FOREIGN_AGE_S = 24 * 3600  # a copy of a process this one cannot see is taken for gone after a day untouched


def check_writable(cache_dir: str | None, given: str | None = None) -> None:
    """UsageError when the cache folder given (--cache-dir, $SCORECLI_CACHE_DIR: `given` says
    which, as the user wrote it) cannot be written or made; None means the default folder, whose
    problems the runs that use it handle."""
    if not cache_dir:
        return
    probe = os.path.realpath(cache_dir)
    while not os.path.exists(probe):  # the nearest folder that exists is where it would be made
        probe = os.path.dirname(probe)
    reason = None if os.path.isdir(probe) else "is not a directory"
    if reason is None and not os.access(probe, os.W_OK | os.X_OK):
        reason = "is not writable"
    if reason is None:  # what access() allows a folder may still refuse (root in /proc, a FUSE mount)
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".scorecli-probe-", dir=probe))
        except OSError as e:
            reason = f"cannot hold a folder ({e.strerror or e})"
    if reason:
        raise UsageError(f"{given or '--cache-dir ' + cache_dir}: cannot write the cache there: {probe} {reason}")


def build_once(target: str, build: Callable[[str], None], what: str, ready: str | None = None) -> bool:
    """Whether `target` was built now (False: it was there already, or a concurrent run won).

    Args:
        target: the cached file, or folder (when `ready` names a file inside it).
        build: writes the file, or fills the (empty) folder, at the temporary path it is given.
        what: names the thing in the one-line error when it cannot be cached.
        ready: the file whose presence says `target` is whole (default: `target` itself).
    Raises:
        UsageError: an OSError while making the cache folder, building or renaming (a full
            disk, a read-only cache or HOME).
    """
    ready = ready or target
    if os.path.isfile(ready):
        return False
    parent = os.path.dirname(target)
    folder = ready != target
    try:  # a read-only HOME (cron, containers) or cache: one line, not a traceback
        os.makedirs(parent, exist_ok=True)
        tmp = _fresh(parent, "" if folder else os.path.splitext(target)[1], folder)
    except OSError as exc:
        raise UsageError(f"cannot cache {what} in {parent}: {exc.strerror or exc}") from exc
    try:
        build(tmp)
        os.replace(tmp, target)
    except OSError as exc:
        if os.path.isfile(ready):  # a concurrent run won the race
            return False
        raise UsageError(f"cannot cache {what} in {target}: {exc}") from exc
    finally:
        if folder:
            shutil.rmtree(tmp, ignore_errors=True)
        elif os.path.exists(tmp):
            os.unlink(tmp)
    return True


def fresh_file(parent: str, suffix: str) -> str:
    """A new empty file in `parent`, under a name no other run uses, with the modes the umask gives
    (to be written, then renamed into place: `model.remembered`)."""
    return _fresh(parent, suffix, False)


def _fresh(parent: str, suffix: str, folder: bool) -> str:
    """A new empty file or folder under a name no other run uses, with the modes the umask gives
    (mkstemp's 0600 and mkdtemp's 0700 would keep the cache from everyone else once renamed),
    after removing what killed runs left in `parent`."""
    sweep(parent)
    while True:
        path = os.path.join(parent, f"{PREFIX}{_namespace()}-{os.getpid()}-{secrets.token_hex(4)}{suffix}")
        try:
            if folder:
                os.mkdir(path)
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return path
        except FileExistsError:
            continue


@functools.cache
def _namespace() -> str:
    """A tag of this process's PID namespace and the machine's boot: where two runs' tags are the
    same, one can tell whether the other's process is still running."""
    parts = []
    for where, read in (("/proc/sys/kernel/random/boot_id", _read), ("/proc/self/ns/pid", os.readlink)):
        try:
            parts.append(read(where))
        except OSError:
            parts.append("")
    if not any(parts):  # no /proc (not Linux): the host's name is what is left to go by
        parts.append(os.uname().nodename)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:8]


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def sweep(parent: str) -> list[str]:
    """Remove the temporary copies in `parent` whose runs are gone (the module's docstring says
    when a run is taken for gone); the names removed. Never raises: what cannot be read or removed
    stays."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
    except OSError:
        return []
    removed = []
    for name in names:
        path = os.path.join(parent, name)
        if _gone(name, path):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    continue
            if not os.path.lexists(path):
                removed.append(name)
    return removed


def _gone(name: str, path: str) -> bool:
    """Whether the run that made the temporary copy `name` is gone."""
    tag, _, rest = name[len(PREFIX) :].partition("-")
    pid = rest.partition("-")[0]
    if tag == _namespace() and pid.isdigit():
        if int(pid) == os.getpid():
            return False
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except OSError:  # running, as another user
            pass
        return False
    return time.time() - _touched(path) > FOREIGN_AGE_S


def _touched(path: str) -> float:
    """When the copy at `path` was last written: its own time, or a folder's newest entry's."""
    try:
        newest = os.lstat(path).st_mtime
        if os.path.isdir(path) and not os.path.islink(path):
            for entry in os.scandir(path):
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
        return newest
    except OSError:
        return time.time()  # vanished or unreadable: not to be removed now
