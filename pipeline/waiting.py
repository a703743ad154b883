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
from collections.abc import Iterator
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


def current() -> list[str]:
    """What this process waits on now, described as of now."""
    now = time.monotonic()
    with _lock:
        waits = list(_current.values())
    return [wait.describe(now) for wait in waits]
