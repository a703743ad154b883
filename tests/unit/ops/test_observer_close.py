"""Closing the status observer never waits longer than its bound for a refresh in flight: a stop
of `--schedule` during a slow reading of the lake (440 s for --status's identity proof on a
2.65M-row lake, found by the stack's adversary) waited for it and was forced out after the
scheduler's 60-s bound with exit 1."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from pipeline.ops import observe
from pipeline.ops.observe import Observation, Observer


class SlowObserver(Observer):
    """An observer whose reading of the lake does not end until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__(settings=None, ttl=0)  # type: ignore[arg-type]  # settings are not read here
        self.reading, self.release = threading.Event(), threading.Event()

    def observe(self) -> Observation:
        self.reading.set()
        self.release.wait()
        return Observation(datetime.now(UTC), error="released")


def test_close_leaves_a_refresh_that_does_not_end_within_its_bound(monkeypatch):
    monkeypatch.setattr(observe, "CLOSE_WAIT_SECONDS", 0.2)
    observer = SlowObserver()
    refresh = observer._kick()
    assert refresh is not None and refresh.daemon  # never holds the process at exit
    assert observer.reading.wait(60)
    closing = threading.Thread(target=observer.close)
    closing.start()
    closing.join(60)
    try:
        assert not closing.is_alive(), "close() waited for the refresh"
        assert refresh.is_alive()  # still reading: left, not waited for
        assert observer._kick() is refresh  # closed: no new refresh starts
    finally:
        observer.release.set()
        refresh.join(60)
    assert not refresh.is_alive()
