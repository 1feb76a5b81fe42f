"""Where `--out` points, decided once before any work: format, kind of file, the path written.

- `-` and `/dev/stdout`: JSON lines on standard output, streamed window by window.
- A device or FIFO (after following symlinks), or an open descriptor (`/dev/stderr`,
  `/dev/fd/3`, whatever it points to): written through, never replaced.
- A path ending in `/`, or an existing directory: a Parquet dataset (`scorecli.engine.checkpoint`).
- A URL (`s3://`, `gs://`, `abfs://`): the same two kinds in a store, a dataset under a prefix
  ending in `/` (or one that holds objects) or one object (`io.writers`, `io.folders`).
- Anything else: a regular file, written under a temporary name beside its real path (a
  symlink's target: the link stays) and renamed onto it at the end; its finished windows are
  kept in `<out>.partial/` meanwhile (`scorecli.engine.checkpoint`).
No target a run writes (the file, the dataset folder, `<out>.partial/`, their parts and
temporary files) may be, hold or lie inside an input, after globs, folders and symlinks are
resolved (stdin by what it reads; docs/input-output.md: Output): scorecli never overwrites or deletes one.
The format comes from the name as given: `.parquet` or no suffix: Parquet; `.jsonl`,
`.json`: JSON lines; `.jsonl.gz`: gzip-compressed JSON lines; any other suffix is refused.
Knows nothing about tables or models.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass

from scorecli.errors import UsageError
from scorecli.io.readers import STDIN
from scorecli.io.schemes import place
from scorecli.io.sources import GLOB_CHARS, localize, source_for
from scorecli.io.stores import locate
from scorecli.io.urls import is_url

STDOUT = "-"
STDOUT_PATHS = (STDOUT, "/dev/stdout")
DESCRIPTORS = ("/dev/stderr", "/dev/fd/", "/proc/self/fd/")
# longest suffix first: `.jsonl.gz` before `.gz`
FORMATS = ((".jsonl.gz", "jsonl.gz"), (".parquet", "parquet"), (".jsonl", "jsonl"), (".json", "jsonl"))
# the most bytes a name scorecli writes beside a file output adds to its name: `.NAME.PID.tmp`,
# a PID of at most 7 digits (Linux's pid_max is 4194304); `NAME.partial` adds 8
BESIDE = len("." + "." + "4194304" + ".tmp")
SUPPORTED = "supported: .parquet (or no suffix), .jsonl, .json, .jsonl.gz, or - for JSON lines on stdout"


@dataclass(frozen=True)
class Target:
    """A resolved `--out`.

    Attributes:
        out: the path as the user gave it (for messages).
        format: "parquet", "jsonl" or "jsonl.gz".
        kind: "stdout", "special" (a device or FIFO: written through), "file", or "dataset"
            (a directory of Parquet parts, `scorecli.engine.checkpoint`).
        path: the file written (symlinks resolved); None for stdout.
    """

    out: str
    format: str
    kind: str
    path: str | None


def output_format(out: str) -> str:
    """ "jsonl" for stdout, else the format the name's suffix says; UsageError for others."""
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


def resolve_output(
    out: str, inputs: list[str] | tuple[str, ...] = (), folders: list[str] | tuple[str, ...] = ()
) -> Target:
    """Check `out` before any work and say how it will be written.

    Args:
        out: the `--out` value.
        inputs: resolved input paths (`-` for stdin); `out` may not be one of them.
        folders: the input folders they were found in, and input globs (local or in a store);
            `out` may not lie inside such a folder or be a file such a glob would list.

    Raises:
        UsageError: empty, unsupported suffix, a missing or unwritable
            directory, a read-only file, a socket, or a target that is, holds or lies
            inside an input (`_touches_input`).
    """
    if not out:
        raise UsageError("--out: empty path (give a .parquet or .jsonl path, or - for stdout)")
    out = localize(out)
    if is_url(out):
        return _checked(_in_store(out), inputs, folders)
    if out not in STDOUT_PATHS and (out.endswith(("/", os.sep)) or os.path.isdir(out)):
        return _checked(_dataset(out), inputs, folders)
    fmt = output_format(out)
    if out in STDOUT_PATHS:
        if sys.stdout is None:  # started with stdout closed (`>&-`)
            raise UsageError(f"cannot write output {out}: standard output is closed")
        return _checked(Target(out, fmt, "stdout", None), inputs, folders)
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
    if reason:
        raise UsageError(f"cannot write output {out}: {reason}")
    kind = "file" if not descriptor and (st is None or stat.S_ISREG(st.st_mode)) else "special"
    if kind == "file" and (reason := _name_too_long(real)):
        raise UsageError(f"cannot write output {out}: {reason}")
    return _checked(Target(out, fmt, kind, real), inputs, folders)


def _dataset(out: str) -> Target:
    """A directory `--out`: a Parquet dataset of part files (`scorecli.engine.checkpoint`)."""
    real = os.path.realpath(out)
    if os.path.exists(real) and not os.path.isdir(real):
        raise UsageError(f"cannot write output {out}: not a directory")
    parent = real if os.path.isdir(real) else os.path.dirname(real)
    if not os.path.isdir(parent):
        raise UsageError(f"cannot write output {out}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write output {out}: directory {parent} is not writable")
    if parent == real:  # a folder that may be written but not listed (mode 0333, a drop box)
        try:
            os.listdir(real)
        except PermissionError:
            raise UsageError(
                f"cannot write output {out}: directory {real} is not readable (scorecli lists a folder before "
                "it writes its parts there, so as to replace only its own)"
            ) from None
    return Target(out, "parquet", "dataset", real)


def _in_store(out: str) -> Target:
    """An `--out` URL: a dataset under a prefix (ending in `/`, or one that holds objects), else
    one object; its bucket must exist and the scheme be one scorecli writes (`io.stores`)."""
    from pyarrow.fs import FileType

    store, path = locate(out)
    store.check_writable(path)
    bucket = path.split("/", 1)[0]
    if store.info(bucket).type == FileType.NotFound:
        raise UsageError(f"cannot write output {out}: the bucket or container {bucket} does not exist")
    url = store.url(path.rstrip("/"))
    if out.endswith("/") or store.info(path).type == FileType.Directory:
        return Target(out, "parquet", "dataset", url)
    return Target(out, output_format(out), "file", url)


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


def _name_too_long(real: str) -> str | None:
    """Why the names scorecli writes beside the file `real`, made from its name (`NAME.partial/`,
    `.NAME.PID.tmp`: `io.temp_files`), would pass the file system's limit on a name (255 bytes on
    most), or None: a name that `touch` takes would fail only after the model loaded."""
    head, base = os.path.split(real)
    try:
        limit = os.pathconf(head or ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    size = len(os.fsencode(base))
    if size + BESIDE <= limit:
        return None
    return (
        f"its name is {size} bytes, and what scorecli writes beside it (NAME.partial/, .NAME.PID.tmp) would "
        f"pass this file system's limit of {limit} bytes per name: give a name of at most {limit - BESIDE} bytes"
    )


def _checked(target: Target, inputs, folders) -> Target:
    reason = _touches_input(target, inputs, folders)
    if reason:
        raise UsageError(f"cannot write output {target.out}: {reason}")
    return target


def _touches_input(target: Target, inputs, folders) -> str | None:
    """Why writing `target` would overwrite, delete or later re-read an input, or None.

    A file is refused when it is an input (the same file, however named) or lies inside an input
    folder; a folder scorecli writes (a dataset, a file's `<out>.partial/`) when it holds an input
    or lies inside an input folder; a file or dataset when an input glob would list what it leaves.
    """
    written = None if target.kind == "stdout" else target.path
    patterns = [folder for folder in folders if GLOB_CHARS & set(folder)]
    folders = [folder for folder in folders if folder not in patterns]
    if written is not None and is_url(written):
        reason = _touches_input_url(target, inputs, folders)
    else:
        reason = _touches_input_file(target, inputs, folders)
    return reason or _matches_pattern(target, patterns)


def _touches_input_file(target: Target, inputs, folders) -> str | None:
    """`_touches_input` for a local output, by inputs and input folders (not globs)."""
    written = None if target.kind == "stdout" else target.path
    try:
        st = os.fstat(1) if written is None else os.stat(written)
    except OSError:
        st = None
    zones = []  # (folder scorecli writes and may clear, how the message names it)
    if target.kind == "dataset":
        zones.append((written, "it"))
    elif target.kind == "file":
        zones.append((written + ".partial", f"its parts folder {target.out}.partial/"))
    for shown, places, other in _input_files(inputs):
        if st is not None and other is not None and stat.S_ISREG(st.st_mode) and _same(st, other):
            return f"it is the input {shown}" if written else f"standard output is the input {shown}"
        for zone, what in zones:
            if any(_within(place, zone) for place in places):
                return f"{what} holds the input {shown}"
    for folder in folders if target.kind in ("file", "dataset") else ():  # its .partial/ lies beside it
        if _within(written, os.path.realpath(folder)):
            return f"it lies inside the input folder {folder} (a later run would read it as input)"
    return None


def _matches_pattern(target: Target, patterns) -> str | None:
    """Why an input glob would list a file that writing `target` leaves (a local glob a local
    file, a store's an object in that store: `io.sources.Source.lists`), or None."""
    if target.kind not in ("file", "dataset"):
        return None
    for pattern in patterns:
        if any(source_for(pattern).lists(pattern, name) for name in _written_files(target)):
            return f"it matches the input pattern {pattern} (a later run would read it as input)"
        # a file's parts: a killed run leaves them for --resume, whose inputs they would join
        if target.kind == "file" and source_for(pattern).lists(pattern, _first_part(target)):
            return (
                f"its parts folder {target.out}.partial/ would hold files that match the input pattern "
                f"{pattern} (a run after a kill would read them as input)"
            )
    return None


def check_apart(target: Target, location: str, flag: str) -> None:
    """UsageError when the folder at `location` (`flag`'s, kept across runs: the score cache) is,
    holds or lies inside what writing `target` makes and may clear (the file, its `<out>.partial/`,
    a dataset folder): a run would delete it, or leave the output a folder of other files."""
    if target.kind not in ("file", "dataset") or target.path is None:
        return
    zones = [target.path] + ([target.path + ".partial"] if target.kind == "file" else [])
    if is_url(target.path) != is_url(localize(location)):
        return  # a store and a local folder never meet
    if is_url(target.path):
        mine, zones, sep = place(locate_url(location)).rstrip("/"), [place(z).rstrip("/") for z in zones], "/"
    else:
        mine, sep = os.path.realpath(localize(location)), os.sep
    if any(a == b or a.startswith(b + sep) for zone in zones for a, b in ((mine, zone), (zone, mine))):
        what = f"{target.out} or its parts folder {target.out}.partial/" if target.kind == "file" else target.out
        raise UsageError(
            f"{flag} {location}: it overlaps the output {what}, which a run writes and replaces; "
            "give it a folder of its own"
        )


def check_unread(location: str, names: tuple[str, ...], flag: str, folders) -> None:
    """UsageError when an input glob (of `folders`: `io.readers.input_folders`) would list one of
    the files `names` (`/`-separated, relative) that `flag`'s folder at `location` keeps across runs
    (the score cache): the run after the one that fills it would read them as input."""
    location = localize(location)
    if is_url(location):
        files = [f"{locate_url(location).rstrip('/')}/{name}" for name in names]
    else:
        files = [os.path.join(os.path.abspath(location), *name.split("/")) for name in names]
    for pattern in (folder for folder in folders if GLOB_CHARS & set(folder)):
        if any(source_for(pattern).lists(pattern, path) for path in files):
            raise UsageError(
                f"{flag} {location}: the input pattern {pattern} matches the files it keeps (a later run "
                "would read them as input); give it a folder the input patterns do not reach"
            )


def _written_files(target: Target) -> list[str]:
    """The files a run leaves at `target` that an input glob could match: the file, or a
    dataset's parts (named as its first) and marker."""
    path = target.path or ""
    sep = "/" if is_url(path) else os.sep
    path = path if is_url(path) else os.path.abspath(path)
    if target.kind != "dataset":
        return [path]
    return [path.rstrip(sep) + sep + name for name in (f"part-00000.{target.format}", "_SUCCESS")]


def _first_part(target: Target) -> str:
    """The first part a run keeps for the file `target` (`<out>.partial/part-00000.parquet`)."""
    path = target.path or ""
    sep = "/" if is_url(path) else os.sep
    path = path if is_url(path) else os.path.abspath(path)
    return f"{path}.partial{sep}part-00000.parquet"


def _touches_input_url(target: Target, inputs, folders) -> str | None:
    """`_touches_input` for an output in a store: objects compared by key (keys are taken as
    written, without dot segments: `io.urls`; objects have no links), in the same store however
    its scheme is spelled."""
    written = place(target.path or "")
    zone, what = (
        (written, "it")
        if target.kind == "dataset"
        else (written + ".partial", f"its parts folder {target.out}.partial/")
    )
    for path in inputs:
        if place(path) == written:
            return f"it is the input {path}"
        if place(path).startswith(zone.rstrip("/") + "/"):
            return f"{what} holds the input {path}"
    for folder in folders:
        if is_url(folder) and written.startswith(place(locate_url(folder)).rstrip("/") + "/"):
            return f"it lies inside the input folder {folder} (a later run would read it as input)"
    return None


def locate_url(spec: str) -> str:
    """A URL as `io.stores` names it (credentials dropped, the scheme's own spelling)."""
    store, path = locate(spec)
    return store.url(path)


def _input_files(inputs) -> list[tuple[str, list[str], os.stat_result | None]]:
    """Each input as (its name in messages, the places it lies at, its stat): a file's real path
    and, for a symlink, the link's own place; stdin (`-`) by the file descriptor 0 reads, if any."""
    out = []
    for path in inputs:
        if path == STDIN:  # a file redirected into stdin (`< scores.jsonl`) is an input too
            try:
                st = os.fstat(0)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                where = os.path.realpath("/proc/self/fd/0")
                out.append(("- (standard input)", [where] if os.path.isfile(where) else [], st))
            continue
        try:
            st = os.stat(path)
        except OSError:
            st = None
        link = os.path.join(os.path.realpath(os.path.dirname(path) or "."), os.path.basename(path))
        out.append((path, [os.path.realpath(path), link], st))
    return out


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _within(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or lies anywhere under it (both real paths)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
