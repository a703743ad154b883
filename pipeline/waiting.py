"""What this process is waiting on now, for ``/healthz`` and the dashboard to say while it waits.

A load that waits (for Spark executors, say) is not failing yet and has not loaded either; the
process's own web server would otherwise go on answering from the lake's history alone ("healthy,
last load 40 s ago") while nothing moves. A waiter registers itself for as long as it waits; the
observer adds every current wait to its answer.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

from pipeline.settings.durations import format_duration


@dataclass(frozen=True)
class Wait:
    what: str  # "Spark executors at spark://host:7077"
    since: float  # time.monotonic() when the wait began
    gives_up_after: timedelta

    def describe(self, now: float) -> str:
        return (f"waiting for {self.what} for {now - self.since:.0f}s (the load gives up after "
                f"{format_duration(self.gives_up_after)})")


_lock = threading.Lock()
_current: dict[int, Wait] = {}
_ids = itertools.count()
_gave_up: tuple[float, str] | None = None  # (time.monotonic(), what) of the last wait that ended in failure
_recorded = 0.0  # time.monotonic() when this process last wrote a job's outcome to the lake's history
_on_record: list[Callable[[], object]] = []  # told at once when an outcome is recorded (observers)


@contextlib.contextmanager
def waiting_for(what: str, since: float, gives_up_after: timedelta) -> Iterator[None]:
    """Registers the wait for the block's length."""
    key = next(_ids)
    with _lock:
        _current[key] = Wait(what, since, gives_up_after)
    try:
        yield
    finally:
        with _lock:
            _current.pop(key, None)


def give_up(what: str) -> None:
    """The wait for ``what`` ends in failure: the load gives up (see :func:`gave_up_after`)."""
    global _gave_up
    with _lock:
        _gave_up = (time.monotonic(), what)


def gave_up_after(moment: float) -> str | None:
    """A wait of this process that failed after ``moment`` (``time.monotonic()``), described; None
    when none did. An answer taken before it does not know yet that the load failed: the wait had
    made it unhealthy, and the failure must not make it healthy again until the lake's record of
    it has been read."""
    with _lock:
        gave_up = _gave_up
    if gave_up is None or gave_up[0] <= moment:
        return None
    return f"a load gave up waiting for {gave_up[1]} {time.monotonic() - gave_up[0]:.0f}s ago"


def recorded() -> None:
    """A job's outcome is in the lake's history now (a load that recovered, say): an answer taken
    before it is out of date (it said "failing" for up to a refresh interval after a recovery)."""
    global _recorded
    with _lock:
        _recorded = time.monotonic()
        listeners = list(_on_record)
    for listener in listeners:
        listener()


def on_record(listener: Callable[[], object]) -> Callable[[], None]:
    """Call ``listener`` (which must return at once) whenever :func:`recorded` is; the function returned
    stops it. An observer starts reading the news when it happens, not when a probe asks: a reading
    begun then had finished, on a busy host, only after the probe's wait for it ran out."""
    with _lock:
        _on_record.append(listener)

    def stop() -> None:
        with _lock:
            if listener in _on_record:
                _on_record.remove(listener)
    return stop


def recorded_after(moment: float) -> bool:
    """Whether this process recorded a job's outcome after ``moment`` (``time.monotonic()``)."""
    with _lock:
        return _recorded > moment


def current() -> list[str]:
    """What this process waits on now, described as of now."""
    now = time.monotonic()
    with _lock:
        waits = list(_current.values())
    return [wait.describe(now) for wait in waits]
