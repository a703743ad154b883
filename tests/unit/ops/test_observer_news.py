"""A job outcome this process records (the load that recovered from a catalog outage) reaches
``/healthz`` through a reading begun after it. CI found the race: a refresh begun during the outage
was still in flight when the recovery's load was recorded; the probe waited for that refresh and
answered its "the lake cannot be read" — 503 for a pipeline that had just loaded."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from pipeline import waiting
from pipeline.ops.observe import Observation, Observer


class ScriptedObserver(Observer):
    """Readings that each wait for ``release`` and then give the next outcome of ``outcomes``."""

    def __init__(self, outcomes: list[str | None]) -> None:
        super().__init__(settings=None, ttl=3600)  # type: ignore[arg-type]  # settings are not read here
        self.outcomes = outcomes
        self.began = threading.Semaphore(0)
        self.release = threading.Event()

    def observe(self) -> Observation:
        self.began.release()
        self.release.wait(60)
        return Observation(datetime.now(UTC), error=self.outcomes.pop(0))


def test_an_outcome_recorded_during_a_reading_is_answered_by_a_reading_begun_after_it():
    observer = ScriptedObserver(["catalog refused the connection", "the reading after the news"])
    stop = waiting.on_record(observer._kick)
    try:
        in_flight = observer._kick()  # begun during the outage
        assert in_flight is not None and observer.began.acquire(timeout=60)
        waiting.recorded()  # the recovery's load is recorded while that reading is still in flight
        observer.release.set()
        answer = observer.latest()
        assert answer.error == "the reading after the news", answer
        assert observer.refreshes == 2
    finally:
        stop()
        observer.release.set()
        observer.close()


def test_a_recorded_outcome_starts_a_reading_before_anyone_asks():
    observer = ScriptedObserver(["the reading after the news"])
    observer.release.set()
    stop = waiting.on_record(observer._kick)
    try:
        waiting.recorded()
        assert observer.began.acquire(timeout=60)  # begun by the record itself, not by a probe
    finally:
        stop()
        observer.close()
