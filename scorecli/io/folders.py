"""The folder a part store keeps its files in: a directory on this machine, or a prefix in a store.

`PartStore` (`io.parts`) asks a `Folder` for what a local disk gives with rename and flock:
- `write`: a file that appears whole or not at all (local: a temporary name, fsync, rename, the
  directory fsync'ed; a store: one request per object, which the store makes visible whole);
- `append`: a journal line made durable (a store has no append: the object is written again);
- `hold` / `check` / `release`: one run at a time. Locally an exclusive `flock` on the directory
  (`io.folder_lock`); in a store, which has no locks, a lease object `_scorecli_lease.json`
  naming the run, renewed while it runs and checked before each commit: a second run on the
  same prefix stops at once while the lease is live, and a run that finds its lease taken
  stops before it commits anything more (docs/object-stores.md).
`folder_at(place)` picks one by whether `place` is a URL. Knows nothing about parts or jobs.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, Protocol

import pyarrow.parquet as pq

from scorecli.errors import UsageError
from scorecli.io.folder_lock import Busy, hold, release
from scorecli.io.sources import for_arrow
from scorecli.io.stores import locate
from scorecli.io.temp_files import create, fsync_dir
from scorecli.io.urls import is_url

LEASE = "_scorecli_lease.json"
LEASE_SECONDS = 300  # a lease not renewed for this long is stale (its run is gone)
_HELD: dict[str, list] = {}  # prefixes this process holds: where -> [run id, holders]


class Folder(Protocol):
    """Where a part store's files live; names are plain file names inside it."""

    where: str  # the folder as messages name it

    def exists(self) -> bool: ...
    def names(self) -> list[str]: ...
    def make(self) -> bool: ...
    def write(self, name: str, fill: Callable[[BinaryIO], None]) -> int: ...
    def append(self, name: str, line: bytes) -> None: ...
    def read(self, name: str) -> bytes | None: ...
    def size(self, name: str) -> int | None: ...
    def source(self, name: str) -> Any: ...
    def plain(self, name: str) -> bool: ...
    def delete(self, name: str) -> None: ...
    def remove(self) -> None: ...
    def remove_if_empty(self) -> None: ...
    def sync(self) -> None: ...
    def hold(self) -> None: ...
    def check(self) -> None: ...
    def release(self) -> None: ...


def folder_at(place: str) -> Folder:
    """The Folder at a local path or a store URL."""
    return StoreFolder(place) if is_url(place) else LocalFolder(place)


def read_schema(folder: Folder, name: str):
    """The Arrow schema (with metadata) of the Parquet file `name`."""
    with opened(folder.source(name)) as source:
        return pq.read_schema(source)


def read_table(folder: Folder, name: str):
    with opened(folder.source(name)) as source:
        return pq.read_table(source)


@contextmanager
def opened(source: str | BinaryIO) -> Iterator[str | BinaryIO]:
    """A `Folder.source` while it is read: a path as it is, a file closed after."""
    if isinstance(source, str):
        yield source
    else:
        with source:
            yield source


class LocalFolder:
    """A directory on this machine."""

    def __init__(self, path: str):
        self.where = path
        self._key: str | None = None

    def _path(self, name: str) -> str:
        return os.path.join(self.where, name)

    def exists(self) -> bool:
        return os.path.isdir(self.where)

    def names(self) -> list[str]:
        return os.listdir(self.where)

    def make(self) -> bool:
        made = not os.path.isdir(self.where)
        os.makedirs(self.where, exist_ok=True)
        return made

    def write(self, name: str, fill: Callable[[BinaryIO], None]) -> int:
        tmp = self._path(f".{name}.{os.getpid()}.tmp")  # its own: two processes may write one name at once
        try:
            with create(tmp) as f:
                fill(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path(name))
        except BaseException:
            _unlink(tmp)
            raise
        fsync_dir(self.where)
        return os.path.getsize(self._path(name))

    def append(self, name: str, line: bytes) -> None:
        with open(self._path(name), "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def read(self, name: str) -> bytes | None:
        try:
            with open(self._path(name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def size(self, name: str) -> int | None:
        try:
            return os.path.getsize(self._path(name))
        except OSError:
            return None

    def source(self, name: str) -> str | BinaryIO:
        """Its path, or the file opened where pyarrow cannot take the path (`io.sources.for_arrow`)."""
        return for_arrow(self._path(name))

    def plain(self, name: str) -> bool:
        path = self._path(name)
        return not os.path.islink(path) and os.path.isfile(path)

    def delete(self, name: str) -> None:
        path = self._path(name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            _unlink(path)

    def remove(self) -> None:
        shutil.rmtree(self.where, ignore_errors=True)

    def remove_if_empty(self) -> None:
        try:
            os.rmdir(self.where)
        except OSError:  # not empty: the user's, or an earlier output's
            pass

    def sync(self) -> None:
        fsync_dir(self.where)

    def hold(self) -> None:
        self._key = self._key or hold(self.where)

    def check(self) -> None:
        """Nothing to check: the flock is held for as long as the process lives."""

    def release(self) -> None:
        release(self._key)
        self._key = None


class StoreFolder:
    """A prefix in a store (`s3://bucket/out/`): objects, and a lease instead of a lock."""

    def __init__(self, url: str):
        self.store, key = locate(url)
        self.key = key.rstrip("/")
        self.where = self.store.url(self.key)
        self.store.check_writable(self.key)
        self.run = uuid.uuid4().hex  # this run's id, in its lease
        self._held = False
        self._stop = threading.Event()
        self._renewed = 0.0

    def _key(self, name: str) -> str:
        return f"{self.key}/{name}"

    def exists(self) -> bool:
        return bool(self.names())

    def names(self) -> list[str]:
        """The objects and the prefixes below this one (a user's `sub/` holds objects scorecli did
        not write, as a local folder's subfolder does)."""
        return [name for i in self.store.listing(self.key) if (name := i.path.rstrip("/").rsplit("/", 1)[-1])]

    def make(self) -> bool:
        return False  # a prefix exists once an object is under it

    def write(self, name: str, fill: Callable[[BinaryIO], None]) -> int:
        buffer = io.BytesIO()
        fill(buffer)
        data = buffer.getvalue()
        self.store.put(self._key(name), data)
        return len(data)

    def append(self, name: str, line: bytes) -> None:
        self.store.put(self._key(name), (self.read(name) or b"") + line)

    def read(self, name: str) -> bytes | None:
        from pyarrow.fs import FileType

        if self.store.info(self._key(name)).type == FileType.NotFound:
            return None
        return self.store.read_bytes(self._key(name))

    def size(self, name: str) -> int | None:
        info = self.store.info(self._key(name))
        return info.size if info.is_file else None

    def source(self, name: str) -> BinaryIO:
        return self.store.open(self._key(name))

    def plain(self, name: str) -> bool:
        return self.size(name) is not None

    def delete(self, name: str) -> None:
        self.store.delete(self._key(name))

    def remove(self) -> None:
        self.store.call("cannot remove", self.key, self.store.fs.delete_dir, self.key)

    def remove_if_empty(self) -> None:
        """Nothing to do: an empty prefix is no folder."""

    def sync(self) -> None:
        """Nothing to do: a written object is durable."""

    # ---- the lease ----------------------------------------------------------------------

    def _lease(self) -> dict | None:
        """The lease under the prefix; None when there is none (or it is torn).

        Raises:
            UsageError: an object of the lease's name that is not a scorecli lease.
        """
        data = self.read(LEASE)
        try:
            lease = json.loads(data) if data else None
        except ValueError:
            return None  # torn: a store never shows a half-written object, but someone else's file may be anything
        if lease is not None and not _is_lease(lease):
            raise UsageError(
                f"{self.where}/{LEASE} is not a scorecli lease (a run id, host, process and renewal "
                "time): remove it, or give another --out"
            )
        return lease

    def _write_lease(self) -> None:
        lease = {"run": self.run, "host": socket.gethostname(), "pid": os.getpid(), "renewed": time.time()}
        self.store.put(self._key(LEASE), json.dumps(lease).encode())
        self._renewed = time.monotonic()

    def hold(self) -> None:
        """Take the prefix for this run, unless another live run holds its lease (stores of one
        process share one lease, as they share a local folder's lock)."""
        if self._held:
            return
        shared = _HELD.get(self.where)
        if shared is not None:
            self.run, shared[1] = shared[0], shared[1] + 1
            self._held = True
            return
        lease = self._lease()
        if lease is not None and lease.get("run") != self.run and not _stale(lease):
            raise Busy(
                f"another scorecli run ({_who(lease)}) is writing {self.where}/ now: wait for it to end, "
                f"or give another --out (a run killed elsewhere frees it {LEASE_SECONDS // 60} minutes "
                f"after its last renewal)"
            )
        self._write_lease()
        self._held = True
        _HELD[self.where] = [self.run, 1]
        self._stop.clear()
        threading.Thread(target=self._renew, name="scorecli-lease", daemon=True).start()
        self.check()  # two runs that started together: the later write won, the other stops here

    def check(self) -> None:
        """Before a commit: stop if another run has taken the lease."""
        if not self._held:
            return
        lease = self._lease()
        if lease is None or lease.get("run") != self.run:
            self._held = False
            _HELD.pop(self.where, None)
            self._stop.set()
            who = f"({_who(lease)}) " if lease else ""
            raise Busy(f"another scorecli run {who}took over {self.where}/: this run stops without writing more")

    def _renew(self) -> None:
        while not self._stop.wait(LEASE_SECONDS / 5):
            try:
                lease = self._lease()
                if lease is None or lease.get("run") != self.run:
                    return  # taken: the next `check` says so
                self._write_lease()
            except Exception:  # noqa: BLE001 - a transient failure: the next renewal tries again
                continue

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        shared = _HELD.get(self.where)
        if shared is not None:
            shared[1] -= 1
            if shared[1] > 0:
                return
            del _HELD[self.where]
        self._stop.set()
        try:
            lease = self._lease()
            if lease is not None and lease.get("run") == self.run:
                self.delete(LEASE)
        except Exception:  # noqa: BLE001 - the run is ending anyway; a stale lease expires
            pass


def _is_lease(lease: Any) -> bool:
    """Whether `lease` has a lease's shape (`_write_lease`): a run id, a renewal time, and the
    host and process if given."""
    if not isinstance(lease, dict) or not isinstance(lease.get("run"), str):
        return False
    renewed, pid, host = lease.get("renewed"), lease.get("pid"), lease.get("host")
    return (
        isinstance(renewed, (int, float))
        and not isinstance(renewed, bool)
        and (pid is None or (isinstance(pid, int) and not isinstance(pid, bool)))
        and (host is None or isinstance(host, str))
    )


def _stale(lease: dict) -> bool:
    """A lease whose run is gone: its process on this host has ended, or it was not renewed in time."""
    if lease.get("host") == socket.gethostname() and isinstance(lease.get("pid"), int):
        try:
            os.kill(lease["pid"], 0)
        except ProcessLookupError:
            return True
        except OSError:
            pass
    return time.time() - float(lease.get("renewed", 0)) > LEASE_SECONDS


def _who(lease: dict) -> str:
    return f"pid {lease.get('pid')} on {lease.get('host')}"


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
