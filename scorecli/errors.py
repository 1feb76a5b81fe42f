"""Errors that stop a run with a clear one-line message.

`UsageError` and `InputError` are the user's to fix (exit code 2); anything else is
ours or the environment's (exit code 1). This module knows nothing about the CLI.
"""


class ScorecliError(Exception):
    """Base class: a failure whose message is meant for the user as one line."""

    exit_code = 1


class UsageError(ScorecliError):
    """Bad flags, a bad model path, an unknown template, an unwritable output."""

    exit_code = 2


class AccessDenied(UsageError):
    """A store refused a request for these credentials (`io.stores`): a team's score cache shared
    read-only is read, not added to (`cache.store.CacheStore`)."""


class ResumeRefused(UsageError):
    """`--resume` that cannot go on with the job its folder holds, the parts kept: its own line
    says how to go on (not "run the same command with --resume", which would meet it again)."""


# how a resumed job whose runtime cannot run here now goes on
RESUME_AS_BEGUN = "run with the --device and --dtype the job began with, or without --resume to start over"


def runtime_gone(scored_by: str, why: str) -> ResumeRefused:
    """The refusal of a resumed job whose kept rows `--runtime auto` had scored with `scored_by` (a
    runtime, or a route's `onnx+torch`), which cannot run here now: one phrasing wherever it is
    found out (`runtimes.onnx.choose`, `runtimes.auto.settle`). `why`: what stops it, as `auto`
    says why it falls back (its `auto: ` dropped)."""
    return ResumeRefused(
        f"--resume: the kept rows were scored by {scored_by} (--runtime auto chose it), which cannot run here now: "
        f"{why.removeprefix('auto: ')}; {RESUME_AS_BEGUN}"
    )


class InputError(ScorecliError):
    """Bad input data; the message names the file, line or row, and the field."""

    exit_code = 2


class Notice(UserWarning):
    """Something a run says on stderr that is no problem, e.g. a kernel compiled on first use, so
    that a long pause is never silent (`notice`). The CLI prints it as `note: ...`, not under --quiet."""


def a_kind(kind: str) -> str:
    """`kind` with its article, as messages name a model of it: "an embedding", "a cross-encoder"."""
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


TEXT_FIELDS = ("query", "items")  # the default field names of a row's query and items
ID_FIELDS = ("query_ids", "item_ids")  # a pre-tokenized row's


def field(names: tuple[str, str], k: int | None = None) -> str:
    """`field 'query'`, or item k's `field 'items'[k]`, under the names the row's query and items
    came from (`--query-field`, `--items-field`, or the pre-tokenized ones): for messages."""
    return f"field '{names[0]}'" if k is None else f"field '{names[1]}'[{k}]"


def notice(text: str) -> None:
    """Say `text` once per place it is said from (Python's warning registry keeps the count)."""
    import warnings

    warnings.warn(text, Notice, stacklevel=2)


class OutputClosed(ScorecliError):
    """The reader of the output (stdout, a FIFO) went away, e.g. `| head -1`: not an error."""


def first_line(err: BaseException | str, limit: int | None = None) -> str:
    """The first line of a text or of an exception's message (an exception without one: its
    type's name), cut to `limit` characters."""
    text = str(err).strip() or (type(err).__name__ if isinstance(err, BaseException) else "")
    line = (text.splitlines() or [""])[0]
    return line[:limit] if limit else line


def error_line(exc: BaseException, limit: int | None = None) -> str:
    """`Type: first line of the message` (just `Type` when it has none)."""
    message = str(exc).strip()
    return f"{type(exc).__name__}: {first_line(message, limit)}" if message else type(exc).__name__
