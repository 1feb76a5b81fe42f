"""Where input files come from: a `Source` per kind of location, chosen by the spec's URL scheme.

- `LocalSource`: paths on this machine (and `file://` URLs): files, directories, globs, pipes;
- `StoreSource`: objects in a store `io.stores` reaches (`s3://`, `gs://`, `abfs://`, `hf://`):
  an object, a prefix ending in `/` (or any prefix that holds objects: a folder), a glob;
  read in ranged requests, never downloaded whole first.
`source_for(spec)` picks one; every reader, the fingerprint and the output checks ask it rather
than `os.path` (docs/ARCHITECTURE.md: Add an input format or source). stdin (`-`) stays the
readers' own. Knows nothing about rows or formats beyond which file names are inputs.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Callable
from typing import BinaryIO, Protocol

from scorecli.errors import UsageError
from scorecli.io.schemes import place
from scorecli.io.stores import Store, locate, plain
from scorecli.io.urls import is_url, local_path, parse, scheme_of, shown

GLOB_CHARS = frozenset("*?[")


# the folder that makes a folder a Delta Lake table (Spark, delta-rs, Databricks)
DELTA_LOG = "_delta_log"


def delta_table(spec: str) -> str:
    """Why a Delta table's folder is not read as a folder of files."""
    return (
        f"{spec}: a Delta table (it holds {DELTA_LOG}/): its folder keeps the Parquet files of earlier "
        "versions too, rows since deleted or updated; export the table's current version (duckdb's "
        "delta_scan, polars' read_delta, Spark) and score that, or name its files with a glob "
        f"('{spec.rstrip('/')}/*.parquet') when the table was only ever appended to"
    )


def _deeper(spec: str, subfolders: bool) -> str:
    """A hint for a folder whose files lie in subfolders (a hive-partitioned dataset)."""
    return (
        f"; its subfolders are not read: name their files with a glob, '{spec.rstrip('/')}/**/*.parquet'"
        if subfolders
        else ""
    )


class Source(Protocol):
    """One kind of input location. Paths are strings as the user writes them (a path or a URL)."""

    def expand(self, spec: str, keep: Callable[[str], bool], supported: str) -> list[str]:
        """The files `spec` names, in reading order: itself, a folder's (non-recursive) or a glob's
        matches, sorted, keeping those `keep(name)` accepts. UsageError when it names none
        (`supported` says which names are inputs)."""
        ...

    def open(self, path: str) -> BinaryIO:
        """The file's bytes, streamed (seekable where the file is)."""
        ...

    def stamp(self, path: str) -> list:
        """What identifies the file's content for `--resume` (docs/long-jobs.md)."""
        ...

    def size(self, path: str) -> int | None:
        """Its size in bytes; None for a stream (a pipe)."""
        ...

    def is_folder(self, spec: str) -> bool:
        """Whether `spec` is read as a folder of files."""
        ...

    def lists(self, pattern: str, path: str) -> bool:
        """Whether expanding the glob `pattern` would list the file `path` once it exists (what
        an output may not be: a later run would read it as input)."""
        ...


class LocalSource:
    """Paths on this machine."""

    def expand(self, spec: str, keep: Callable[[str], bool], supported: str) -> list[str]:
        if os.path.isdir(spec):
            listed = os.listdir(spec)
            if DELTA_LOG in listed:
                raise UsageError(delta_table(spec))
            names = sorted(n for n in listed if not hidden(n))
            found = [f for f in (os.path.join(spec, n) for n in names) if os.path.isfile(f) and keep(f)]
            if not found:
                deeper = any(os.path.isdir(os.path.join(spec, n)) for n in names)
                raise UsageError(
                    f"input not found: {spec} (no input files in directory{_deeper(spec, deeper)}; {supported})"
                )
            return found
        if os.path.exists(spec):
            return [spec]
        if GLOB_CHARS & set(spec):
            # `**`: any depth of folders, as a shell's globstar; none hidden (glob keeps out only a
            # leading dot; `hidden`, Spark's `_temporary/` too): the names after the first wildcard
            # matched again as store globs match them
            parts = spec.split(os.sep)
            first = _first_wildcard(parts)
            listed = glob.glob(spec, recursive=True)
            matches = sorted(m for m in listed if _names_match(m.split(os.sep)[first:], parts[first:]))
            if not matches:
                raise UsageError(f"input not found: {spec}")
            found = [m for m in matches if os.path.isfile(m) and keep(m)]
            if not found:
                raise UsageError(f"input not found: {spec} (no input files match; {supported})")
            return found
        raise UsageError(f"input not found: {spec}")

    def open(self, path: str) -> BinaryIO:
        return open(path, "rb")

    def stamp(self, path: str) -> list:
        st = os.stat(path)
        return [os.path.realpath(path), st.st_size, st.st_mtime_ns]

    def size(self, path: str) -> int | None:
        return os.path.getsize(path) if os.path.isfile(path) else None

    def is_folder(self, spec: str) -> bool:
        return os.path.isdir(spec)

    def lists(self, pattern: str, path: str) -> bool:
        """As `glob.glob(pattern, recursive=True)` would: the folder before the pattern's first
        wildcard is `path`'s (as real paths), and the names after it match `path`'s name by name
        (`_names_match`, the matcher store globs use). `path` is tried as written and with its folder
        resolved, since either spelling may pass through the pattern's head."""
        if is_url(path):
            return False
        parts = os.path.abspath(pattern).split(os.sep)
        first = _first_wildcard(parts)
        head, tail = os.path.realpath(os.sep.join(parts[:first]) or os.sep), parts[first:]
        written = os.path.abspath(path)
        resolved = os.path.join(os.path.realpath(os.path.dirname(written)), os.path.basename(written))
        for spelling in dict.fromkeys((written, resolved)):
            names = spelling.split(os.sep)
            for k in range(1, len(names)):
                if os.path.realpath(os.sep.join(names[:k]) or os.sep) == head and _names_match(names[k:], tail):
                    return True
        return False


class StoreSource:
    """Objects in a store, named by URLs."""

    def expand(self, spec: str, keep: Callable[[str], bool], supported: str) -> list[str]:
        store, path = locate(spec)
        if GLOB_CHARS & set(path):
            return self._glob(store, spec, path, keep, supported)
        if not parse(spec).folder:
            info = store.info(path)
            if info.is_file:
                return [store.url(path)]
        infos = store.listing(path)
        if any(not i.is_file and os.path.basename(i.path.rstrip("/")) == DELTA_LOG for i in infos):
            raise UsageError(delta_table(shown(spec)))
        listed = sorted(i.path for i in infos if i.is_file)
        found = [store.url(p) for p in listed if not hidden(os.path.basename(p)) and keep(p)]
        if found:
            return found
        if listed or infos:
            deeper = _deeper(shown(spec), any(not i.is_file and not hidden(_base(i.path)) for i in infos))
            raise UsageError(f"input not found: {shown(spec)} (no input files under it{deeper}; {supported})")
        raise UsageError(f"input not found: {shown(spec)} ({_nothing_at(store, path)})")

    def _glob(self, store: Store, spec: str, path: str, keep: Callable[[str], bool], supported: str) -> list[str]:
        """Objects matching a glob (`_globbed`), from one listing of the folder it names."""
        folder, deep = _scope(path)
        names = sorted(i.path for i in store.listing(folder, recursive=deep) if i.is_file)
        matches = [p for p in names if _globbed(p, path)]
        if not matches:
            raise UsageError(f"input not found: {shown(spec)}")
        found = [store.url(p) for p in matches if keep(p)]
        if not found:
            raise UsageError(f"input not found: {shown(spec)} (no input files match; {supported})")
        return found

    def open(self, path: str) -> BinaryIO:
        store, key = locate(path)
        return store.open(key)

    def stamp(self, path: str) -> list:
        store, key = locate(path)
        info = store.info(key)
        return [store.url(key), info.size, store.version(key)]

    def size(self, path: str) -> int | None:
        store, key = locate(path)
        return store.info(key).size

    def is_folder(self, spec: str) -> bool:
        store, path = locate(spec)
        if GLOB_CHARS & set(path):
            return False
        return parse(spec).folder or not store.info(path).is_file

    def lists(self, pattern: str, path: str) -> bool:
        """As `expand` would (`_globbed`), comparing the two in the same store however its
        scheme is spelled."""
        if not is_url(path) or scheme_of(path) == "file":
            return False
        written, glob = (place(store.url(key)) for store, key in (locate(path), locate(pattern)))
        return _globbed(written, glob)


def _scope(pattern: str) -> tuple[str, bool]:
    """The folder a store glob is listed from, the longest before its first wildcard, and whether
    recursively: when the pattern spans folders, or has `**`."""
    head = pattern[: min(pattern.index(c) for c in GLOB_CHARS if c in pattern)]
    folder = head.rsplit("/", 1)[0]
    return folder, pattern.count("/") > folder.count("/") + 1 or "**" in pattern


def hidden(name: str) -> bool:
    """Whether a file or folder name is one that readers of datasets pass over: hidden (`.`), or
    what Spark, Hadoop and Hive writers keep beside their parts (`_SUCCESS`, `_temporary/`: an
    unfinished or killed job's task outputs, `_committed_*`), as pyarrow's datasets and Spark read a
    folder. A folder listing and a wildcard pass over them; a name written out is read."""
    return name.startswith((".", "_"))


def _base(path: str) -> str:
    return os.path.basename(path.rstrip("/"))


def _first_wildcard(parts: list[str]) -> int:
    """The index of a glob's first path component holding a wildcard."""
    return next(i for i, part in enumerate(parts) if GLOB_CHARS & set(part))


def _globbed(path: str, pattern: str) -> bool:
    """Whether a store glob lists the object `path` as a local glob lists a file: name by name (a
    `*` within one folder's name; a `hidden` name only by a pattern starting as it does), `**` any
    number of folders, none hidden. (A `*` used to span folders: `rows/*/*.jsonl` read
    `rows/2026/11/x.jsonl` too.)"""
    return _names_match(path.split("/"), pattern.split("/"))


def _names_match(names: list[str], parts: list[str]) -> bool:
    if not parts:
        return not names
    if parts[0] == "**":
        return any(
            _names_match(names[k:], parts[1:])
            for k in range(len(names) + 1)
            if not any(hidden(name) for name in names[:k])
        )
    return bool(names) and _name_matches(names[0], parts[0]) and _names_match(names[1:], parts[1:])


def _name_matches(name: str, part: str) -> bool:
    """Whether glob matches `name` by the pattern component `part` (a `hidden` name only by a part
    starting with its `.` or `_`)."""
    return (not hidden(name) or part.startswith(name[0])) and fnmatch.fnmatchcase(name, part)


def _nothing_at(store: Store, path: str) -> str:
    from pyarrow.fs import FileType

    bucket = path.split("/", 1)[0]
    if store.scheme_info.buckets and store.info(bucket).type == FileType.NotFound:
        return f"the bucket or container {bucket} does not exist"
    return "no such object, and no objects under it"


# scheme -> Source: "" is a local path; every scheme io.stores registers is a StoreSource
_LOCAL, _STORE = LocalSource(), StoreSource()


def for_arrow(path: str) -> str | BinaryIO:
    """A local file as pyarrow opens it: its path, or the file opened when its name is not UTF-8
    (bytes another system wrote, which Python keeps as surrogate escapes and pyarrow, which takes
    UTF-8 paths only, cannot encode: such a file is read through Python)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return open(path, "rb")
    return path


def source_for(spec: str) -> Source:
    """The Source that reads `spec` (a `file://` URL is a local path: see `localize`)."""
    return _STORE if is_url(spec) and scheme_of(spec) != "file" else _LOCAL


def localize(spec: str) -> str:
    """A `file://` URL as the local path it names; a store URL without its options (`?region=`:
    they configure the store once it is made, `io.stores.plain`); anything else unchanged."""
    if scheme_of(spec) == "file":
        return local_path(spec)
    return plain(spec) if is_url(spec) else spec
