"""Checkpointed output for long runs (docs/long-jobs.md): finished windows are kept as durable parts.

A run whose `--out` is a file writes each window's table as a part in `<out>.partial/`
(`io.parts`); on success the parts are streamed, in input order, through the ordinary `Sink`
into `<out>` (atomically) and the folder is removed. A directory `--out` is a Parquet dataset:
the parts are the output, and `_SUCCESS` is the last file written. A failed, interrupted or killed run
leaves the parts; `--resume` continues after them when the job's fingerprint (`job`) matches.
stdout, devices and FIFOs are streamed through the `Sink` directly: nothing to resume.

`Checkpoint.open` decides all that before the model loads, so a refused `--resume` changes
nothing and costs nothing. Knows nothing about models or scoring: it gets tables, and reads
back from the kept parts' metadata which runtime scored them (`same_runtime`).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pyarrow as pa

from scorecli.config import ScoreConfig
from scorecli.engine.job import FROM_CACHE, fingerprint, model_stamps, pinned_runtime
from scorecli.engine.windows import Schedule
from scorecli.errors import InputError, ResumeRefused, ScorecliError, UsageError, error_line
from scorecli.io.output import Target
from scorecli.io.parts import FingerprintMismatch, Part, PartStore, open_store
from scorecli.io.readers import count_rows
from scorecli.io.schema import conform, merge_schema, null_nonfinite, with_metadata
from scorecli.io.urls import is_url
from scorecli.io.writers import FileSink
from scorecli.runtimes import RUNTIMES, installed
from scorecli.runtimes.route import Route

INPUT_ROWS = "input_rows"  # the job file's count of the input's rows, once the last window is kept (`ended`)

# benchmarks/bench_checkpoint.py turns parts off to measure what they cost
PARTS = True


def _windows(settings: dict) -> str:
    """A job's windows in words, from its settings."""
    if settings.get("part_rows"):
        return f"parts of {settings['part_rows']} rows"
    return f"windows growing from one row to at most {settings.get('window_rows')} rows"


def _choices(metadata: dict[str, str]) -> dict[str, str]:
    """The device (its type), dtype and attention backend a run's output metadata names."""
    return {
        "device": metadata.get("device", "").split(":")[0],
        "dtype": metadata.get("dtype", ""),
        "attention": metadata.get("attention", ""),
    }


def _said(choices: dict[str, str]) -> str:
    return f"on {choices['device']} in {choices['dtype']} with {choices['attention']} attention"


class Interrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM during a checkpointed run; the message says what is kept."""


class Checkpoint:
    """The part store of one run, and how its parts become the output.

    Attributes:
        rows_done: input rows an earlier run of this job finished (0 for a new job).
        note: a one-line warning for the user to see at once (a resumed job's windows kept), or None.
    """

    def __init__(
        self,
        target: Target,
        store: PartStore,
        note: str | None,
        shown: str,
        replacing: str | None = None,
        warn: Callable[[str], None] | None = None,
    ):
        self.target = target
        self.store = store
        self.note = note
        self.shown = shown  # the folder as the user names it
        # an earlier run's folder that this new job's first part replaces: said (`warn`) then, not
        # before, so a run refused before that (a bad row, a bad flag) says only why, and replaces nothing
        self.replacing = replacing
        self.warn = warn
        self.rows_done = store.rows_done
        self.nulled: dict[str, int] = {}
        self.written = False  # the output is complete and in place
        self.paths: list[str] = []  # the job's inputs (`all_kept`)
        self.job: dict = {}  # a new job's fingerprint, written with its first part (`begin`)
        self.model = ""

    @classmethod
    def open(
        cls,
        target: Target,
        cfg: ScoreConfig,
        paths: list[str],
        resume: bool,
        warn: Callable[[str], None] | None = None,
    ) -> Checkpoint | None:
        """The run's checkpoint; None when the output is streamed (stdout, a device, a FIFO), or
        a file written from stdin (nothing to resume). A dataset from stdin keeps its parts.
        `warn` gets the one-line warning that an earlier run's folder is replaced, when the first
        part replaces it (None: not said).

        Raises:
            UsageError: `--resume` for a streamed output or stdin input, or a folder of a
                different job (`FingerprintMismatch`: nothing changed).
        """
        if not PARTS and target.kind == "file":
            return None
        if target.kind not in ("file", "dataset"):
            if resume and target.kind == "stdout":
                raise UsageError(f"--resume: {target.out} is standard output, which keeps no parts to resume from")
            return None  # a device or FIFO keeps no parts: with --resume, the job just starts
        dataset = target.kind == "dataset"
        # stdin, or a pipe named as a file (`<(zcat rows.gz)`, a FIFO): read once, never again
        once = [p for p in paths if p == "-" or (not is_url(p) and not os.path.isfile(p))]
        if once:
            if resume and "-" in once:
                raise UsageError("--resume: stdin (-) cannot be read again; give the input as files")
            if resume:
                raise UsageError(f"--resume: {once[0]} is a pipe, which cannot be read again; give the input as files")
            if not dataset:
                return None  # a run from stdin cannot continue: no parts to keep (a dataset's parts are its output)
        folder = target.path if dataset else target.path + ".partial"
        shown = target.out if dataset else target.out + ".partial"
        local = not is_url(folder)  # a prefix in a store has no links, and an object of its name is another object
        if not local or os.path.realpath(shown) != folder:  # --out is a symlink: the folder is beside its target
            shown = folder
        if local and (os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder))):
            what = "a symlink" if os.path.islink(folder) else "a file"
            raise UsageError(f"{shown} is {what}, not the folder of parts scorecli keeps there: move it away")
        job = fingerprint(cfg, paths, f"{target.kind}:{target.format}")
        settings = {
            "window_rows": cfg.window_rows,
            "window_seconds": cfg.window_seconds,
            "part_rows": cfg.window_rows if cfg.window_seconds is None else None,
            INPUT_ROWS: None,  # until the last window is kept (`ended`)
        }
        store, replacing = open_store(folder, job, "parquet", resume, dataset, settings)
        note = None
        kept = (store.settings.get("window_rows"), store.settings.get("window_seconds"))
        if store.resumed and kept[0] is not None and kept != (cfg.window_rows, cfg.window_seconds):
            given = (
                f"--window-rows {cfg.window_rows}"
                if cfg.window_seconds is None
                else f"--window-seconds {cfg.window_seconds:g} (up to --window-rows {cfg.window_rows})"
            )
            note = (
                f"{given} is not used: the job goes on in {_windows(store.settings)} as it began, so that its "
                "scores equal an uninterrupted run's (which rows share a batch moves float32 scores in their "
                "last bits)"
            )
        checkpoint = cls(target, store, note, shown.rstrip("/") + "/", replacing, warn)
        checkpoint.paths = paths
        checkpoint.job, checkpoint.model = job, cfg.model
        return checkpoint

    @contextmanager
    def keeping(self) -> Iterator[None]:
        """Around the whole run: on failure the parts stay and the error's message says how
        many rows are kept and that `--resume` continues (docs/cli.md: Exit codes)."""
        try:
            yield
        except BaseException as exc:
            if isinstance(exc, ResumeRefused):  # another job, or not here: its own line says how to go on
                raise
            if self.written and isinstance(exc, KeyboardInterrupt):  # while the parts were being removed
                raise Interrupted(self._written_whole()) from exc
            if not self.store.durable_rows() and not self.store.parts:
                self._discard()  # nothing kept: no folder to explain
                raise
            if isinstance(exc, InputError) and not self.store.resumed:
                # a bad row: going on needs another input, which is another job, so the rows
                # this new job kept could never be resumed (docs/cli.md: Exit codes)
                self._discard()
                raise
            if isinstance(exc, KeyboardInterrupt):
                raise Interrupted(f"interrupted: no output written; {self.kept()}") from exc
            if isinstance(exc, ScorecliError):
                raise type(exc)(f"{exc} ({self.kept()})") from exc
            if isinstance(exc, Exception):
                raise ScorecliError(f"{error_line(exc)} ({self.kept()})") from exc
            raise
        finally:
            self.store.release()  # another run may use the folder now

    def _discard(self) -> None:
        """Undo a store that holds no part, unless its folder cannot be reached (a store that
        stopped answering): the run's own error says why it stopped, not the clean-up's."""
        try:
            self.store.discard()
        except ScorecliError:
            pass

    def kept(self, rows: int | None = None) -> str:
        """What a failed run leaves (`rows`: as counted in memory; by default as the journal holds
        them), and how to go on."""
        rows = self.store.durable_rows() if rows is None else rows
        return f"{rows:,} rows kept in {self.shown}; run the same command with --resume to continue"

    def _written_whole(self) -> str:
        left = "" if self.target.kind == "dataset" else f"; {self.shown} is left over: remove it"
        return f"interrupted after {self.target.out} was written whole{left}"

    def second_signal_line(self) -> str | None:
        """The line of a second signal that ends the run before `keeping` has made the first's:
        what the folder keeps, from memory (the process exits at once; None: nothing kept)."""
        if self.written:
            return self._written_whole()
        rows = self.store.rows_done
        return f"interrupted: no output written; {self.kept(rows)}" if rows else None

    def write(self, table: pa.Table) -> None:
        """Keep one window's output as a durable part (non-finite scores as null, as `Sink` writes
        Parquet: a NaN float id stays NaN; a JSON lines output nulls it when it is made)."""
        table, nulled = null_nonfinite(table, scalars=False)
        for name, n in nulled.items():
            self.nulled[name] = self.nulled.get(name, 0) + n
        self.begin()
        self.store.add(table)

    def schedule(self, cfg: ScoreConfig) -> Schedule:
        """The rows of each window still to come (`engine.windows`): a resumed job's own (those its
        kept parts and settings give), a new job's from `cfg`; the size growing settles on is
        recorded in the job file at once."""
        settings = self.store.settings if self.store.resumed else {}
        cap = int(settings.get("window_rows") or cfg.window_rows)
        seconds = settings["window_seconds"] if "window_seconds" in settings else cfg.window_seconds

        def record(size: int, first: int) -> None:
            self.store.settings["part_rows"], self.store.settings["part_rows_from"] = size, first
            self.store.save_settings()

        kept = [p.rows for p in self.store.parts]
        return Schedule(cap, seconds, kept, settings.get("part_rows"), record, settings.get("part_rows_from") or 0)

    def record(self, part: Part, nulled: dict[str, int]) -> None:
        """Journal a part that a Ray worker wrote straight into the store (`engine.ray_workers`)."""
        for name, n in nulled.items():
            self.nulled[name] = self.nulled.get(name, 0) + n
        self.begin()
        self.store.record(part)

    def begin(self) -> None:
        """Take the folder before the first part (`PartStore.begin`); where that replaces an
        earlier run's folder, say so then, once."""
        if self.replacing is not None:
            if self.warn is not None:
                self.warn(self.replacing)
            self.replacing = None
        if self.job and not self.job["model file"] and not self.store.resumed:
            # a Hub model that was not in the Hugging Face cache when the job was opened has been
            # downloaded by now: its files are the job's (json: as the job file reads back)
            self.job["model file"] = json.loads(json.dumps(model_stamps(self.model)))
        self.job = {}  # written with the first part
        self.store.begin()

    def sink(self, metadata: dict[str, str]) -> PartsSink:
        """This checkpoint as the run's `io.sinks.Sink`."""
        return PartsSink(self, metadata)

    def blocks(self, cfg: ScoreConfig, rows: int) -> Schedule:
        """Input rows per part of a Ray job (a block; the local engine's windows: `schedule`): a
        resumed job's own windows, so that the rest of its rows share batches as in an
        uninterrupted run (a job whose windows were still growing grows on from its kept parts up
        to its cap: no window's time is measured here); a new job's `rows`, kept with it."""
        settings = self.store.settings
        if self.store.resumed and self.store.parts and (settings.get("part_rows") or settings.get("window_rows")):
            return self.schedule(cfg)
        settings["part_rows"] = rows
        return Schedule(rows)

    def ended(self) -> None:
        """The job's last window is kept: the job file says how many rows the input holds, so that
        a `--resume` after a failure from here on (in the final merge, a full disk) knows every row
        is kept without reading the input (`all_kept`)."""
        if self.store.parts and self.store.settings.get(INPUT_ROWS) != self.store.rows_done:
            self.store.settings[INPUT_ROWS] = self.store.rows_done
            self.store.save_settings()

    def all_kept(self, cfg: ScoreConfig) -> bool:
        """Whether the kept parts of this resumed job hold every row of its input (its fingerprint
        says the input is as it was): the job file says so (`ended`); a job file of an earlier
        version, which has no such record, has the input's rows counted where that is cheap (local
        files, ungrouped: Parquet's metadata, JSON lines' lines). A job of this version stopped
        part-way is not counted here: its engine counts the input once, for the progress line."""
        if not self.store.resumed or not self.rows_done:
            return False
        if INPUT_ROWS in self.store.settings:  # a job file of this version: set once the last window is kept
            return self.store.settings[INPUT_ROWS] == self.rows_done
        if cfg.group_by is not None or not self.paths or any(p == "-" or is_url(p) for p in self.paths):
            return False
        total = count_rows(self.paths)
        return total is not None and total <= self.rows_done

    def same_runtime(self, cfg: ScoreConfig) -> ScoreConfig:
        """`cfg` for the rest of a resumed job: `--runtime auto` runs what scored the kept rows.

        The fingerprint records `auto`, whose choice depends on whether onnxruntime is installed
        and on which runtime measured faster (`runtimes.auto`); a job resumed after either changed
        would otherwise mix two runtimes' scores. Where `auto` ran one runtime on short batches and
        the other on long ones, the rest of the job cuts at the same length (`runtime_route`). The
        kept rows' reason goes with it, so that the metadata is the uninterrupted run's.

        Raises:
            UsageError: the kept rows ran ONNX Runtime, which this run cannot import.
        """
        if cfg.runtime != "auto" or not self.store.parts:
            return cfg
        metadata = self.metadata()
        route = Route.from_metadata(metadata.get("runtime"), metadata.get("runtime_cut_tokens"))
        infos = [RUNTIMES.get(name) for name in (route.runtimes if route else ())]
        if not infos or not all(info is not None and info.auto for info in infos):
            return cfg
        for info in infos:  # each a runtime `auto` may choose (checked above)
            if info is not None and info.needs and not installed(info.needs):
                raise UsageError(
                    f"--resume: the kept rows were scored by {info.description} (--runtime auto chose "
                    f"it), and {info.needs} is no longer installed: pip install 'scorecli[onnx]'"
                )
        return pinned_runtime(cfg, metadata)

    def same_choices(self, metadata: dict[str, str] | None) -> None:
        """Refuse to go on with a resumed job on another device, dtype or attention backend than
        its kept rows were scored with (`metadata`: this run's output metadata; None: not known
        yet). `auto` resolves by machine, and two resolutions' scores mixed in one output would be
        neither job's (only a device's index is not part of the choice).

        Raises:
            FingerprintMismatch: they differ (nothing changed; the parts stay).
        """
        if not metadata or not self.store.resumed or not self.store.parts:
            return
        scored = (self._metadata(name) for name in reversed(self.store.names()))
        kept = next((m for m in scored if m.get("self_check") != FROM_CACHE), None)
        if kept is None:  # every kept window came from the score cache: no choice of this job's to keep
            return
        then, now = _choices(kept), _choices(metadata)
        if then == now or not all(then.values()):  # parts of an older scorecli may not say
            return
        flags = " ".join(f"--{key} {then[key]}" for key in then if then[key] != now[key])
        raise FingerprintMismatch(
            f"--resume: the kept rows of {self.shown} were scored {_said(then)}, and this run would score "
            f"{_said(now)}: pass {flags} to go on as the job began, or run without --resume to start over"
        )

    def metadata(self) -> dict[str, str]:
        """The output metadata the last kept part was written with (for a job whose rows are all kept)."""
        return self._metadata(self.store.names()[-1])

    def _metadata(self, name: str) -> dict[str, str]:
        schema = self.store.schema(name)
        return {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}

    def id_type(self, field: str) -> pa.DataType | None:
        """The id column's type in the kept parts (None: no part has a typed id column)."""
        for name in self.store.names():
            schema = self.store.schema(name)
            if field in schema.names and not pa.types.is_null(schema.field(field).type):
                return schema.field(field).type
        return None

    def finish(self, metadata: dict[str, str], closing: dict[str, str] | None = None) -> None:
        """Make the output from the parts: one file through the `Sink`, or the finished dataset.
        `closing`: metadata keys known only at the end (every part of a dataset gets them)."""
        if self.target.kind == "dataset":
            self._unify_parts(closing or {})
            self.store.mark_finished()
            self.written = True
            self._tidy(
                self.store.drop_bookkeeping, "its bookkeeping (_scorecli_*) is left in it: the next run drops it"
            )
        else:
            schemas = [self.store.schema(name) for name in self.store.names()]
            final = _merged(schemas) if schemas else None
            sink = FileSink(self.target, metadata | (closing or {}))
            try:
                with sink:
                    for table in self.store.tables():  # every row with every column (an id a window lacked: null)
                        sink.write(table if final is None else conform(table, final))
            finally:
                self.written = sink.committed  # an interrupt just after the rename: the output is whole
            self._tidy(self.store.remove, f"{self.shown} is left over: remove it")

    def _tidy(self, step, left: str) -> None:
        """`step` once the output is in place: where the folder cannot be tidied (a store that
        stopped answering), the run has still succeeded, and a warning says what is left."""
        try:
            step()
        except (ScorecliError, OSError) as exc:
            warnings.warn(
                f"{self.target.out} is written whole, but {left} ({error_line(exc)})", RuntimeWarning, stacklevel=2
            )

    def _unify_parts(self, closing: dict[str, str]) -> None:
        """Give every part the dataset's one schema: a part written before a column's type was
        known (all null in its window), or before the metadata the run closes with, is rewritten
        under the final schema."""
        schemas = [self.store.schema(name) for name in self.store.names()]
        final = _merged(schemas)
        final = with_metadata(final.with_metadata(schemas[-1].metadata), closing)
        for name, schema in zip(self.store.names(), schemas):
            if not schema.equals(final, check_metadata=True):
                table = conform(self.store.table(name), final).replace_schema_metadata(final.metadata)
                self.store.rewrite(name, table)


def _merged(schemas: list[pa.Schema]) -> pa.Schema:
    """The one schema that holds every part's: columns some windows lacked (the id field where a
    window's rows had none, labels) and types a window left null."""
    final = schemas[0]
    for schema in schemas[1:]:
        final = merge_schema(final, schema)
    return final


class PartsSink:
    """The `io.sinks.Sink` of a checkpointed run: each window a durable part (`Checkpoint.write`),
    or one a Ray worker wrote (`record`); `close` makes the output from the parts
    (`Checkpoint.finish`); `abort` keeps them (`Checkpoint.keeping` says how many rows)."""

    def __init__(self, checkpoint: Checkpoint, metadata: dict[str, str]):
        self.checkpoint = checkpoint
        self.metadata = metadata
        self.out = checkpoint.target.out
        self.nulled = checkpoint.nulled
        self.streamed = 0

    def write(self, table: pa.Table) -> None:
        self.checkpoint.write(table)

    def record(self, part: Part, nulled: dict[str, int]) -> None:
        self.checkpoint.record(part, nulled)

    def close(self, metadata: dict[str, str] | None = None) -> None:
        self.checkpoint.finish(self.metadata, metadata or {})

    def abort(self) -> None:
        """Nothing to undo: the parts are what a failed run keeps."""
