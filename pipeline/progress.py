"""Progress on long work: one line on stderr, redrawn in place, with counts and rows/s.

Only on a terminal: a pipe, a log file or a process manager gets none (they get the log
lines, which say the same at the end), and ``--quiet`` or ``--log-format json`` turn it off.
A log line printed meanwhile first clears the progress line (see :mod:`pipeline.logs`), and
the next update draws it again below.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator

REDRAW_SECONDS = 0.2  # at most five redraws a second
_enabled = True
_drawn = threading.Event()  # a progress line is on screen, not yet ended by a newline
_lock = threading.Lock()


def configure(*, enabled: bool) -> None:
    global _enabled
    _enabled = enabled


def active() -> bool:
    return _enabled and sys.stderr.isatty()


def clear_line() -> None:
    """Wipe a drawn progress line (a log line is about to take its place)."""
    if _drawn.is_set():
        with _lock:
            sys.stderr.write("\r\x1b[2K")
            _drawn.clear()


class Progress:
    """``Progress("extracting", total=120_000).update(45_000)`` draws
    ``extracting: 45,000/120,000 rows (38%), 12,345 rows/s, 3.6s``."""

    def __init__(self, what: str, total: int | None = None, unit: str = "rows") -> None:
        self.what, self.total, self.unit = what, total, unit
        self.started = time.monotonic()
        self._last = 0.0
        self.done = 0
        self.note = ""  # the current step, kept by ticking redraws

    def update(self, done: int | None = None, note: str = "", *, force: bool = False) -> None:
        if done is not None:
            self.done = done
        now = time.monotonic()
        if not active() or (not force and now - self._last < REDRAW_SECONDS):
            return
        self._last = now
        with _lock:
            sys.stderr.write("\r\x1b[2K" + self.line(now - self.started, note))
            sys.stderr.flush()
            _drawn.set()

    @contextlib.contextmanager
    def ticking(self, every: float = 0.5) -> Iterator[Progress]:
        """Redraw every ``every`` seconds while the block runs, so the elapsed time moves during
        one long statement; steps inside say what is happening with ``step``."""
        if not active():
            yield self
            return
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(every):
                self.update(note=self.note, force=True)

        thread = threading.Thread(target=tick, name="progress", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=2)

    def step(self, note: str) -> None:
        self.note = note
        self.update(note=note, force=True)

    def finish(self, done: int | None = None, note: str = "") -> None:
        """Draw the final counts and end the line (kept on screen)."""
        self.update(done, note, force=True)
        if active():
            with _lock:
                sys.stderr.write("\n")
                sys.stderr.flush()
                _drawn.clear()

    def line(self, elapsed: float, note: str = "") -> str:
        parts = [f"{self.what}:"]
        if self.done or self.total:
            count = f"{self.done:,}" + (f"/{self.total:,}" if self.total else "") + f" {self.unit}"
            if self.total:
                count += f" ({min(100, 100 * self.done // max(self.total, 1))}%)"
            parts.append(count + ",")
            if elapsed > 0 and self.done:
                parts.append(f"{self.done / elapsed:,.0f} {self.unit}/s,")
        parts.append(f"{elapsed:.1f}s")
        if note:
            parts.append(f"· {note}")
        return " ".join(parts)
