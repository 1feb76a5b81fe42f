"""A score cache's LOCATION: a local folder or a prefix in an object store (`io.folders`).

    LOCATION/scorecli-score-cache.json       what the folder is, and its format version
    LOCATION/requests/<request>.json         flags as given -> the settings they resolved to
    LOCATION/models/<files>.json             a model folder's file stamps -> its content digest
    LOCATION/segments/<settings>/<t>-<id>.arrow   immutable segments of entries (`segments`)

Every file is written whole or not at all (a local temporary name, fsync and rename; one PUT in
a store) under a name no other run uses, and never changed afterwards: two runs writing one cache
at once each add their own segments, and a run killed at any instant leaves the segments of the
windows it finished and at most a temporary file (`.NAME.PID.tmp`, which readers ignore and `prune`
removes). Compaction writes the merged segment before it deletes what it merged: a crash between
leaves duplicate entries (the same scores), never a lost one; a reader that listed a segment just
deleted passes over it (its pairs are in the merged one). Knows nothing about rows or models.
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from scorecli.cache.identity import Memo
from scorecli.cache.segments import SUFFIX, Damaged, Entries, read_entries, read_metadata, to_ipc
from scorecli.engine.job import SCORE_CACHE_MARKER
from scorecli.errors import AccessDenied, ScorecliError, UsageError, first_line
from scorecli.io.folders import Folder, folder_at, opened
from scorecli.io.urls import is_url, local_path, scheme_of

MARKER = SCORE_CACHE_MARKER
FORMAT_NAME = "scorecli score cache"
FORMAT_VERSION = 1
MAX_SEGMENTS = 8  # a settings' segments before the smaller ones are merged
KEEP_LARGEST = 3  # the largest segments a merge leaves alone (size-tiered: big ones are rewritten rarely)
STALE_TEMP_SECONDS = 3600  # a temporary file this old is a killed writer's
# what a write into a folder the run may only read fails with (a team's cache shared read-only)
_READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)
_DIGEST = re.compile(r"[0-9a-f]{32}")  # `identity.digest`'s


def _join(base: str, *names: str) -> str:
    if is_url(base):
        return "/".join([base.rstrip("/"), *names])
    return os.path.join(base, *names)


@dataclass(frozen=True)
class SegmentInfo:
    profile: str
    name: str
    size: int
    meta: dict[str, str]

    @property
    def rows(self) -> int:
        return int(self.meta.get("rows", 0))


class _FolderMemo(Memo):
    """Model identities remembered in the cache's `models/` folder."""

    def __init__(self, folder: Folder):
        self.folder = folder

    def get(self, key: str) -> str | None:
        try:
            data = self.folder.read(f"{key}.json")
            identity = json.loads(data)["identity"] if data else None
        except (ValueError, KeyError, TypeError, OSError, ScorecliError):
            return None  # unreadable: hash the files again
        return identity if isinstance(identity, str) and _DIGEST.fullmatch(identity) else None

    def put(self, key: str, value: str) -> None:
        try:
            self.folder.make()
            self.folder.write(f"{key}.json", lambda f: f.write(json.dumps({"identity": value}).encode()))
        except (OSError, ScorecliError):
            pass  # a cache we cannot write to still serves lookups


class CacheStore:
    """The cache at `location`. `create`: make it when the folder is missing or empty (a run);
    otherwise a missing LOCATION is an error (`cache info`, `cache prune`).

    Raises:
        UsageError: no cache there (and not `create`), a folder holding other files, an
            unreadable marker, or a format this version cannot read.
    """

    def __init__(self, location: str, create: bool):
        self.shown = location.rstrip("/") if is_url(location) else location
        # a local folder named as a URL (SPEC 15) is that folder
        self.location = local_path(location) if scheme_of(location) == "file" else self.shown
        self.root = folder_at(self.location)
        self._open(create)
        self.memo = _FolderMemo(self._folder("models"))
        # why this run cannot write into the cache (a read-only folder), once a write said so: it
        # is read, not added to (`not_added`: the entries a run could not add, for its warning)
        self.read_only: str | None = None
        self.not_added = 0

    def _folder(self, *names: str) -> Folder:
        return folder_at(_join(self.location, *names))

    def _open(self, create: bool) -> None:
        try:
            names = self.root.names() if self.root.exists() else None
            if names is not None:  # another run making the cache this instant has only a temporary file
                names = [n for n in names if not _temporary(n)]
        except OSError as exc:
            raise UsageError(f"score cache {self.shown}: cannot read it ({exc.strerror or exc})") from exc
        if not is_url(self.location) and os.path.exists(self.location) and not os.path.isdir(self.location):
            raise UsageError(f"score cache {self.shown}: a file, not a folder")
        if names is None or not names:
            if not create:
                raise UsageError(f"score cache {self.shown}: no such cache (a run with --score-cache makes one)")
            self._make()
            return
        data = self.root.read(MARKER) if MARKER in names else None
        if data is None:
            raise UsageError(
                f"score cache {self.shown}: the folder holds other files and no {MARKER}: "
                "give a new or empty folder (scorecli writes nothing into a folder it did not make)"
            )
        try:
            marker = json.loads(data)
            name, version = marker["format"], int(marker["version"])
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"score cache {self.shown}: {MARKER} cannot be read ({first_line(exc)})") from exc
        if name != FORMAT_NAME or version != FORMAT_VERSION:
            raise UsageError(
                f"score cache {self.shown}: format {name!r} version {version}, which this scorecli "
                f"(format version {FORMAT_VERSION}) cannot read: give another --score-cache folder"
            )

    def _make(self) -> None:
        marker = json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION}).encode()
        try:
            self.root.make()
            self.root.write(MARKER, lambda f: f.write(marker))
        except OSError as exc:
            raise UsageError(f"score cache {self.shown}: cannot create it ({exc.strerror or exc})") from exc

    # ---- requests ---------------------------------------------------------------------

    def request(self, digest: str) -> dict | None:
        """What an earlier run recorded for request `digest` (None: none, or unreadable or not such
        a record: the model loads and records it again)."""
        try:
            data = self._folder("requests").read(f"{digest}.json")
            record = json.loads(data) if data else None
        except (ValueError, OSError, ScorecliError):
            return None
        return record if _a_record(record) else None

    def save_request(self, digest: str, record: dict) -> None:
        """Record what request `digest` resolved to (not where the cache is read-only: `read_only`)."""
        if self.read_only is not None:
            return
        folder = self._folder("requests")
        try:
            with self._writing():
                folder.make()
                folder.write(f"{digest}.json", lambda f: f.write(json.dumps(record, sort_keys=True).encode()))
        except ScorecliError as exc:
            if not self._denied(exc):
                raise

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A write into the cache, whose failure (a full disk, a read-only folder) says that it
        is the cache that could not be written, not the output (exit 1; a run's own writes pass
        over a folder it may only read: `add`, `save_request`)."""
        try:
            yield
        except OSError as exc:
            raise ScorecliError(f"score cache {self.shown}: cannot write to it ({exc.strerror or exc})") from exc

    # ---- segments ---------------------------------------------------------------------

    def profiles(self) -> list[str]:
        """The settings digests that have segments."""
        if is_url(self.location):
            from pyarrow.fs import FileType

            folder = self._folder("segments")
            listing = folder.store.listing(folder.key)  # type: ignore[attr-defined]
            return sorted(i.path.rstrip("/").rsplit("/", 1)[-1] for i in listing if i.type == FileType.Directory)
        base = _join(self.location, "segments")
        return (
            sorted(d for d in os.listdir(base) if os.path.isdir(os.path.join(base, d))) if os.path.isdir(base) else []
        )

    def segment_names(self, profile: str) -> list[str]:
        folder = self._folder("segments", profile)
        try:
            names = folder.names() if folder.exists() else []
        except FileNotFoundError:
            return []
        return sorted(n for n in names if n.endswith(SUFFIX) and not n.startswith("."))

    def read(self, profile: str, name: str, with_added: bool = False) -> Entries | None:
        """A segment's entries; None when it is gone (merged by another run, also after it was
        listed) or damaged (one warning: its pairs are scored again)."""
        folder = self._folder("segments", profile)
        try:
            source = self._body(folder, name)
            if source is None:
                return None
            entries, _ = read_entries(source, profile, with_added)
            return entries
        except FileNotFoundError:
            return None
        except ScorecliError as exc:
            if _gone(exc):
                return None
            raise
        except Damaged as exc:
            warnings.warn(
                f"score cache {self.shown}: segment {profile}/{name} {exc}; passed over (its pairs are scored again)",
                RuntimeWarning,
                stacklevel=2,
            )
            return None

    def _body(self, folder: Folder, name: str):
        """What `segments.read_entries` reads of a segment: a local file's path (memory-mapped) or,
        where pyarrow cannot take its path (`io.sources.for_arrow`), its bytes; a stored object's
        bytes (None: gone)."""
        if is_url(self.location):
            return folder.read(name)
        with opened(folder.source(name)) as source:
            return source if isinstance(source, str) else source.read()

    def infos(self, profile: str, verify: bool = False) -> list[SegmentInfo | tuple[str, str]]:
        """Each segment's metadata, or (name, why) for a damaged one; `verify`: each read whole and
        its checksum checked (`cache info`, `cache prune`), else only its footer (a damaged body
        then shows when a run reads it)."""
        folder = self._folder("segments", profile)
        out: list[SegmentInfo | tuple[str, str]] = []
        for name in self.segment_names(profile):
            try:
                if verify:  # the whole segment read, its metadata with it
                    body = self._body(folder, name)
                    if body is None:
                        continue
                    meta = read_entries(body, profile)[1]
                else:
                    with opened(folder.source(name)) as source:
                        meta = read_metadata(source)
                out.append(SegmentInfo(profile, name, folder.size(name) or 0, meta))
            except FileNotFoundError:
                continue
            except ScorecliError as exc:
                if not _gone(exc):
                    raise
            except Damaged as exc:
                out.append((name, str(exc)))
        return out

    def write(self, profile: str, entries: Entries, model: dict[str, str]) -> str:
        """Add a segment of `entries` (any order); returns its name."""
        data = to_ipc(entries.sorted_unique(), profile, model)
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}{SUFFIX}"
        folder = self._folder("segments", profile)
        with self._writing():
            folder.make()
            folder.write(name, lambda f: f.write(data))
        return name

    def add(self, profile: str, entries: Entries, model: dict[str, str]) -> str | None:
        """A run's new `entries` as a segment (`write`); None where the cache is read-only for
        this run (`read_only`): they are counted in `not_added` instead."""
        if self.read_only is None:
            try:
                return self.write(profile, entries, model)
            except ScorecliError as exc:
                if not self._denied(exc):
                    raise
        self.not_added += len(entries.sorted_unique())
        return None

    def _denied(self, exc: ScorecliError) -> bool:
        """Whether a failed write (`_writing`'s error) was refused because this run may not write
        into the cache (permissions, a read-only file system, a store that denies it); if so,
        `read_only` says why."""
        if isinstance(exc, AccessDenied):  # a store's: credentials that may read the prefix, not write it
            self.read_only = "access denied"
            return True
        cause = exc.__cause__
        if isinstance(cause, OSError) and cause.errno in _READ_ONLY:
            self.read_only = cause.strerror or str(cause)
            return True
        return False

    def delete(self, profile: str, name: str) -> None:
        """Remove a segment; one already gone (another run's merge) is no error, one the store or
        folder refuses to remove (access denied, a store down) is: `prune` must not say it went."""
        try:
            self._folder("segments", profile).delete(name)
        except FileNotFoundError:
            pass  # deleted by another run's merge already
        except ScorecliError as exc:
            if not _gone(exc):
                raise

    def merge(self, profile: str, names: list[str], model: dict[str, str] | None = None) -> str | None:
        """Merge segments `names` into one (written first, then they are deleted); `model`: what
        the merged one says about its model (None: what the first of them says)."""
        parts = [e for e in (self.read(profile, n, with_added=True) for n in names) if e is not None]
        if not parts:
            return None
        if model is None:
            info = next((i for i in self.infos(profile) if isinstance(i, SegmentInfo) and i.name in names), None)
            meta = info.meta if info else {}
            model = {"identity": meta.get("model_identity", ""), "name": meta.get("model_name", "")}
        merged = self.write(profile, Entries.concat(parts), model)
        for name in names:
            self.delete(profile, name)
        return merged

    def compact(self, profile: str, model: dict[str, str] | None = None) -> None:
        """When a settings' segments pile up, merge all but the few largest."""
        infos = [i for i in self.infos(profile) if isinstance(i, SegmentInfo)]
        if len(infos) <= MAX_SEGMENTS:
            return
        infos.sort(key=lambda i: i.size)
        self.merge(profile, [i.name for i in infos[: len(infos) - KEEP_LARGEST]], model)

    def tidy(self, profile: str, own: list[str], model: dict[str, str] | None = None) -> None:
        """After a run: its segments `own` merged into one, and the settings' segments compacted
        when they pile up. Housekeeping only (every entry is durable already): where it cannot be
        done (a full disk, a read-only folder), one warning, and the run still succeeds."""
        if self.read_only is not None:  # this run added nothing; `Reusing.close` says so
            return
        try:
            if len(own) > 1:
                self.merge(profile, own, model)
            self.compact(profile, model)
        except (OSError, ScorecliError) as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
            why = getattr(cause, "strerror", None) or first_line(cause)
            warnings.warn(
                f"score cache {self.shown}: this run's segments were not merged ({why}); every entry "
                "is kept, and a later run or `scorecli cache prune` compacts them",
                RuntimeWarning,
                stacklevel=2,
            )

    def forget_requests(self, identity: str) -> None:
        """Remove what requests of the model `identity` (or an identity starting so) resolved to."""
        folder = self._folder("requests")
        try:
            names = folder.names() if folder.exists() else []
        except FileNotFoundError:
            return
        for name in names:
            record = self.request(name.removesuffix(".json")) if name.endswith(".json") else None
            if record is not None and str(record.get("identity") or "").startswith(identity):
                folder.delete(name)

    def tidy_temps(self, *where: str) -> int:
        """Remove the temporary files killed writers left in the cache's folder `where`
        (("segments", PROFILE), ("requests",), ("models",), or () for the cache's own; local
        folders only: a store has none); how many went."""
        if is_url(self.location):
            return 0
        base, now = _join(self.location, *where), time.time()
        try:
            names = os.listdir(base)
            stale = [n for n in names if _temporary(n) and now - _mtime(os.path.join(base, n)) > STALE_TEMP_SECONDS]
        except OSError:
            return 0
        for name in stale:
            self._folder(*where).delete(name)
        return len(stale)


def _a_record(record) -> bool:
    """Whether `record` is what `Reusing` saves for a request: the settings digest, the labels and
    the positive label's index (anything else read as none, not a KeyError that stops every run)."""
    if not isinstance(record, dict):
        return False
    settings, labels, positive = record.get("settings"), record.get("labels"), record.get("positive_index")
    return (
        isinstance(settings, str)
        and _DIGEST.fullmatch(settings) is not None
        and type(labels) is int
        and type(positive) is int
        and 0 <= positive < labels
        and isinstance(record.get("metadata", {}), dict)
    )


def _gone(exc: ScorecliError) -> bool:
    """Whether a store's read failed because the object is gone: deleted after it was listed (a
    segment another run merged), which a local file's FileNotFoundError says."""
    return isinstance(exc.__cause__, FileNotFoundError)


def _mtime(path: str) -> float:
    """When `path` was last written (now: gone already, another prune removed it)."""
    try:
        return os.path.getmtime(path)
    except FileNotFoundError:
        return time.time()


def _temporary(name: str) -> bool:
    """Whether `name` is a file still being written (`io.folders`: `.NAME.PID.tmp`, then renamed)."""
    return name.startswith(".") and name.endswith(".tmp")
