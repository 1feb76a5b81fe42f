"""Build a cached file or folder once, atomically: under a temporary name next to it, then
renamed into place, so a killed run never leaves half of it where the next run looks, and two
runs building it at once both end with one whole copy. What is built gets the modes the
process's umask gives (0644 and 0755 under umask 022, group-writable under 002), as any file
made in place would: a cache folder shared by a group stays readable by all of it.

Shared by the dequantized GGUF checkpoints (`gguf`), the ONNX exports (`runtime_onnx`) and
their int8 copies (`runtime_int8`). Knows nothing about what is built or how it is keyed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable

from scorecli.errors import UsageError


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
    (mkstemp's 0600 and mkdtemp's 0700 would keep the cache from everyone else once renamed)."""
    while True:
        path = os.path.join(parent, f".building-{os.getpid()}-{secrets.token_hex(4)}{suffix}")
        try:
            if folder:
                os.mkdir(path)
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return path
        except FileExistsError:
            continue
