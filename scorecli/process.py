"""How the `scorecli` process ends: exit codes after signals, a closed output pipe, a closed
stdin. Knows nothing about scoring or flags.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def finish(code: int) -> None:
    """Exit with `code`. After a failure, exit at once: a reader thread blocked on a stalled
    stdin must not hold the process (threads are not joined, buffers not flushed twice).

    After success too, once the exit handlers have run and stdout is flushed: tearing down
    the interpreter's modules (torch, transformers) only frees memory the process is about to
    give back, and costs about a second (benchmarks/RESULTS.md, issue 21). A worker thread
    still running gets the normal exit, which waits for it."""
    if code == 0:
        _before_success_exit()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _before_success_exit() -> None:
    """What a normal exit does first: a live non-daemon thread gets the normal exit (which waits
    for it); else the exit handlers run and stdout is flushed, a closed pipe ending the process
    as `pipe_closed` says."""
    import atexit
    import threading

    main = threading.main_thread()
    if any(t is not main and t.is_alive() and not t.daemon for t in threading.enumerate()):
        sys.exit(0)
    atexit._run_exitfuncs()  # logging, temporary folders, Ray
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        pipe_closed()
    except (OSError, ValueError):
        pass


def pipe_closed() -> None:
    """The reader of our output went away (`| head -1`): end quietly, as Unix filters do,
    by SIGPIPE (status 141 in a shell)."""
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    os._exit(128 + signal.SIGPIPE)  # not reached where SIGPIPE kills


_signals: list[int] = []  # the signal that interrupted the run, if any
_held = [0, False]  # how deep the main thread is in `uninterrupted` steps; whether a signal waits for them


def watch_signals(say_interrupted: Callable[[], None]) -> None:
    """SIGINT, SIGTERM and SIGHUP interrupt the run (exit 130 / 143 / 129, output discarded, parts
    kept); a second one while cleaning up exits at once, after `say_interrupted()`. An ignored
    SIGINT (a background job) or SIGHUP (`nohup`) stays ignored: a terminal that closes under an
    ssh session sends SIGHUP, and its default action would end the run without a word."""

    def on_signal(signum, frame) -> None:
        if _signals:  # a second signal: say why (if the first has not yet), then go at once
            say_interrupted()
            os._exit(128 + _signals[0])
        _signals.append(signum)
        if _held[0]:
            _held[1] = True  # raised as the step ends (`uninterrupted`)
            return
        raise KeyboardInterrupt

    for signum in (signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, on_signal)
    signal.signal(signal.SIGTERM, on_signal)


@contextmanager
def uninterrupted() -> Iterator[None]:
    """A short step that must not stop half-way (an object written to a store in one request:
    pyarrow completes an upload whose stream is closed early, with what it holds so far, so an
    interrupt between opening and writing it left an empty object in its place). A first SIGINT,
    SIGTERM or SIGHUP in it interrupts the run as the step ends; a second still ends the process at
    once (no upload completes then). Main thread only: it is where signals are handled."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _held[0] += 1
    try:
        yield
    finally:
        _held[0] -= 1
        waiting = not _held[0] and _held[1]
        if waiting:
            _held[1] = False
    if waiting:
        raise KeyboardInterrupt


def interrupted_code() -> int:
    """The exit code of an interrupted run: 128 + the signal, 130 for a plain interrupt."""
    return 128 + _signals[0] if _signals else 130


def reserve_standard_fds() -> None:
    """Started with stdin, stdout or stderr closed (`<&-`, `>&-`): keep each such descriptor on
    /dev/null, so that no file we open (an input, a part, the output) takes its number and
    receives what a library writes to it or reads from it; reading `-` and writing `--out -`
    are still refused (Python's own `sys.stdin`/`sys.stdout` stay None)."""
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, mode)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
