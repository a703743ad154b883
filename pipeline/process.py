"""How every long-running command meets its process's edges: the stop signals, and a stdout
whose reader went away. Written once for the pipeline's commands and the generator."""

from __future__ import annotations

import _thread
import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# signals this close together are one request: ``uv run`` forwards the signal a terminal (or
# ``timeout``, or systemd) also sent to the whole group, so Python gets each one twice
SAME_REQUEST_SECONDS = 1.0
FORCE_AFTER = 3  # the third request ends the process at once, whatever it is doing


class _StopSignals:
    """The process's stop-signal handler. It only counts and writes a byte to a pipe — nothing
    that takes a lock, since a second signal can arrive while the first one's handler runs on
    the same thread (a handler that set a ``threading.Event`` hung there for good). A watcher
    thread reads the pipe and calls the command's own handler, once."""

    def __init__(self, handler: Callable[[], None]) -> None:
        self.handler = handler
        self.requests, self.last = 0, -SAME_REQUEST_SECONDS
        self.signum: int | None = None  # the first request's signal
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        threading.Thread(target=self._watch, name="stop-signals", daemon=True).start()

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.signum is None:
            self.signum = signum
        if now - self.last >= SAME_REQUEST_SECONDS:
            self.requests += 1
        self.last = now
        if self.requests >= FORCE_AFTER:
            os.write(2, b"stopping now (third stop request)\n")
            os._exit(128 + signum)
        if _interrupt and not _ended and threading.current_thread() is threading.main_thread():
            # interrupt_command's call of interrupt_main() lands here (it runs the SIGINT handler,
            # ours, not Python's default): raise in the main thread as that default would. A stop
            # in a command's first second, before anything registered a canceller, was lost
            _interrupt.clear()  # a list, not an Event: no lock in a signal handler
            raise KeyboardInterrupt
        with contextlib.suppress(OSError):  # a full pipe: the watcher has plenty to read already
            os.write(self._write, b"!")

    def _watch(self) -> None:
        os.read(self._read, 1)
        self.handler()

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self.on_signal)


_installed: _StopSignals | None = None
_interrupt: list[bool] = []  # non-empty: interrupt_command asks the main thread's handler to raise
_ended: list[bool] = []  # non-empty: the command returned; an interruption landing now has nothing to stop


_native_work_left: list[bool] = []  # non-empty: a thread was left inside native code (a DuckDB read)


def native_work_left() -> None:
    """A thread is left running inside native code (a status refresh reading the lake) to end with
    the process: the command's process then ends without Python's finalization (:func:`end`), which
    destroyed DuckDB's objects under that thread (``terminate called without an active exception``,
    exit -6 for a scheduler that had stopped cleanly)."""
    _native_work_left.append(True)


def end(code: int) -> None:
    """The command returned ``code``: with a thread left in native code, end the process now (its
    output flushed), else return to Python's own exit."""
    if not _native_work_left:
        return
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def command_ended() -> None:
    """The command returned (with its last line said): a stop's interruption of the main thread that
    lands from now on is not raised (it turned a stopped command's exit into a traceback, its
    code into -2, when it came as the command ended)."""
    _ended.append(True)


def on_stop(handler: Callable[[], None]) -> None:
    """Call ``handler`` (once, on a thread of its own) on SIGTERM or SIGINT (Ctrl-C): the command
    finishes what it is doing and ends, instead of dying mid-transaction. A second request while
    it stops changes nothing; a third ends the process at once."""
    global _installed
    if _installed is not None and _installed.handler is handler:
        _installed.install()  # already ours (the script installs it first, entry() again): keep its count
        return
    if _installed is None:
        # a request that arrives while the interpreter exits (the forwarded copy of the one that
        # stopped it) would meet the default handlers Python restores then, and turn a clean exit
        # into 130 or 143: from the exit on, stop signals are ignored
        atexit.register(_ignore_stop_signals)
    _installed = _StopSignals(handler)
    _installed.install()
    if sys.unraisablehook is not _unraisable:
        _hooks[:] = [sys.unraisablehook]
        sys.unraisablehook = _unraisable


def _unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """A stop's interruption (:func:`interrupt_command`) that the main thread met inside a callback
    Python cannot raise from — a module lock's weakref callback as an import ends — was printed as
    "Exception ignored … Traceback" on the user's terminal and went no further: it is raised again,
    once the callback has returned. Anything else goes to the hook there was."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _installed is not None \
            and _installed.handler is interrupt_command and _installed.signum is not None and not _ended:
        # from another thread, a moment later: asked here, the handler runs (and raises) in this hook
        threading.Timer(0.01, interrupt_command).start()
        return
    _hooks[0](unraisable)


_hooks: list[Callable[[sys.UnraisableHookArgs], object]] = []  # the unraisable hook there was before ours


# what a stop request cancels in a command that runs once: the Spark jobs of its session, the
# DuckDB query of a SQL session (registered by those while they run)
_cancellers: list[Callable[[], None]] = []


@contextlib.contextmanager
def cancellable(cancel: Callable[[], None]) -> Iterator[None]:
    """While the block runs, a stop request calls ``cancel`` (it stops what the main thread waits
    on) before it interrupts the main thread."""
    if _installed is not None and _installed.handler is interrupt_command and _installed.signum is not None:
        raise KeyboardInterrupt  # the stop came before this work began: it never starts
    _cancellers.append(cancel)
    try:
        yield
    finally:
        _cancellers.remove(cancel)


def interrupt_command() -> None:
    """The stop handler of a command that runs once (``--run``, ``--sql``, ``--verify`` …): cancel
    what it waits on, then raise KeyboardInterrupt in its main thread, which ends it with its last
    line. A transaction in flight rolls back (promotion commits or rolls back as a whole)."""
    for cancel in list(_cancellers):
        with contextlib.suppress(Exception):  # the JVM or the server may be going away already
            cancel()
    _interrupt.append(True)
    _thread.interrupt_main()


def stop_signal() -> int | None:
    """The signal of the first stop request (None: none came)."""
    return _installed.signum if _installed is not None else None


def _ignore_stop_signals() -> None:
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def reclaim_signals() -> None:
    """Put this process's stop handler back after a library replaced it (pyspark's SparkContext
    installs a SIGINT handler that cancels jobs and raises KeyboardInterrupt, over ours)."""
    if _installed is not None and threading.current_thread() is threading.main_thread():
        _installed.install()


def exit_quietly_on_broken_pipe(run: Callable[[], int]) -> int:
    """``run()``, but a closed stdout (``… | head``) ends it with SIGPIPE's code, no traceback."""
    try:
        return run()
    except BrokenPipeError:
        # no traceback, and none when Python flushes stdout at exit; the code SIGPIPE gives
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
