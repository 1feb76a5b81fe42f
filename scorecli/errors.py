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


class InputError(ScorecliError):
    """Bad input data; the message names the file, line or row, and the field."""

    exit_code = 2


class OutputClosed(ScorecliError):
    """The reader of the output (stdout, a FIFO) went away, e.g. `| head -1`: not an error."""
