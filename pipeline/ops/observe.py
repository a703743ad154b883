"""One observation of the pipeline (status, health and the lake's history), shared by the
metrics, the health endpoint and the dashboard, and cached so that a Prometheus scraper, a
browser and a load balancer's probe together cost one lake read per ``ttl`` seconds."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import duckdb

from pipeline.errors import LakeNotCreated, first_line, scrub_secrets
from pipeline.lake import history, jobs
from pipeline.lake.connect import lake_session
from pipeline.lake.identity import table_names
from pipeline.ops import health
from pipeline.ops.status import Status, collect
from pipeline.settings import ResolvedSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Observation:
    at: datetime
    status: Status | None = None
    batches: list[dict[str, Any]] = field(default_factory=list)
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    expiries: list[dict[str, Any]] = field(default_factory=list)  # when snapshots were expired, which
    job_runs: list[dict[str, Any]] = field(default_factory=list)
    job_totals: list[dict[str, Any]] = field(default_factory=list)
    rows_loaded: int = 0
    batches_loaded: int = 0
    error: str | None = None  # why status or history could not be read (catalog or source down)
    seconds: float = 0.0  # how long collecting took


def observe(settings: ResolvedSettings) -> Observation:
    """Read everything once; a failure becomes ``error`` (the server keeps answering)."""

    start, now = time.monotonic(), datetime.now(UTC)
    try:
        status = collect(settings)
        series = _series(settings) if status.lake_exists else {}
    except Exception as exc:  # noqa: BLE001  a down catalog or source is something to show, not to crash on
        log.warning("could not observe the pipeline: %s", first_line(exc))
        return Observation(now, error=scrub_secrets(first_line(exc)) or type(exc).__name__,
                           seconds=time.monotonic() - start)
    return Observation(now, status=status, **series, seconds=time.monotonic() - start)


def through_outage(last: Observation, failed: Observation) -> Observation:
    """What a scrape during an outage shows (pure): the last good series, judged failing, the time
    since the last successful load still counting — so the alerts docs/running.md gives (health > 0, that
    age) fire for the outage's length instead of every lake series vanishing with ``up 0``."""
    assert last.status is not None
    judged = health.unreadable(failed.error, failed.at, last.status.health.last_success)
    return replace(last, at=failed.at, status=replace(last.status, health=judged), error=failed.error,
                   seconds=failed.seconds)


def _series(settings: ResolvedSettings) -> dict[str, Any]:
    try:
        with lake_session(settings, read_only=True) as con:
            return _read_series(con, settings)
    except LakeNotCreated:  # created between the two reads' answers: nothing to chart yet
        return {}


def _read_series(con: duckdb.DuckDBPyConnection, settings: ResolvedSettings) -> dict[str, Any]:
    series: dict[str, Any] = {"snapshots": history.snapshots(con, settings)}
    if (settings.ops_schema, "batches") in table_names(con, settings):
        series["batches"] = history.batches(con, settings)
        series["rows_loaded"], series["batches_loaded"] = history.rows_loaded(con, settings)
    if jobs.source(con, settings):
        series["expiries"] = history.expiries(con, settings)
        series["job_runs"] = history.job_runs(con, settings)
        series["job_totals"] = history.job_totals(con, settings)
    return series


class Observer:
    """The latest observation, refreshed in the background once older than ``ttl`` seconds.

    A request is answered from the cache at once, however long a lake read takes on a busy
    machine (one took 5.2 s, past Prometheus's 5 s scrape timeout); only the very first
    request waits for a read. One refresh runs at a time; :meth:`close` waits for it, so a
    stopping process never exits while a thread is inside DuckDB or libpq."""

    def __init__(self, settings: ResolvedSettings, ttl: float = 10.0) -> None:
        self.settings, self.ttl = settings, ttl
        self._lock = threading.Lock()
        self._latest: Observation | None = None
        self._taken = 0.0
        self._refreshing: threading.Thread | None = None
        self._closed = False

    def latest(self) -> Observation:
        with self._lock:
            stale = self._latest is None or time.monotonic() - self._taken > self.ttl
            if stale and self._refreshing is None and not self._closed:
                self._refreshing = threading.Thread(target=self._refresh, name="observe")
                self._refreshing.start()
            first, pending = self._latest is None, self._refreshing
        if first and pending is not None:
            pending.join()  # nothing to answer from yet
        with self._lock:
            return self._latest or Observation(datetime.now(UTC), error="the server is stopping")

    def _refresh(self) -> None:
        observation = observe(self.settings)
        with self._lock:
            if observation.error and self._latest is not None and self._latest.status is not None:
                observation = through_outage(self._latest, observation)
            self._latest, self._taken, self._refreshing = observation, time.monotonic(), None

    def close(self) -> None:
        with self._lock:
            self._closed, pending = True, self._refreshing
        if pending is not None:
            pending.join()
