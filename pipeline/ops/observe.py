"""One observation of the pipeline (status, health and the lake's history), shared by the
metrics, the health endpoint and the dashboard, and cached so that a Prometheus scraper, a
browser and a load balancer's probe together cost one lake read per ``ttl`` seconds."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import duckdb

from pipeline import process, waiting
from pipeline.errors import LakeNotCreated, first_line, is_transient, scrub_secrets
from pipeline.lake import history, jobs
from pipeline.lake.connect import lake_session
from pipeline.lake.identity import table_names
from pipeline.lake.rows import Rows
from pipeline.lake.session import Lake
from pipeline.lake.transaction import one_read
from pipeline.ops import health
from pipeline.ops.status import Status, collect
from pipeline.settings import ResolvedSettings
from pipeline.storage.outage import store_outage

log = logging.getLogger(__name__)


@dataclass
class Series:
    """The lake's history as the dashboard charts it and /metrics counts it (:mod:`.history`)."""

    batches: Rows = field(default_factory=list)
    snapshots: Rows = field(default_factory=list)
    expiries: Rows = field(default_factory=list)  # when snapshots were expired, which
    job_runs: Rows = field(default_factory=list)
    job_totals: Rows = field(default_factory=list)
    rows_loaded: int = 0
    batches_loaded: int = 0
    # SOURCE_TABLES: each table's (rows inserted, batches promoted) — the totals above are their sums
    by_table: dict[str, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def read(cls, lake: Lake, tables: Sequence[str]) -> Series:
        """The history of the pipeline's ``tables`` (SOURCE_TABLES', or its one)."""
        series = cls(snapshots=history.snapshots(lake))
        if (lake.ops_schema, "batches") in table_names(lake):
            series.batches = history.batches(lake, tables)
            series.by_table = history.rows_loaded(lake, tables)
            series.rows_loaded = sum(rows for rows, _ in series.by_table.values())
            series.batches_loaded = sum(count for _, count in series.by_table.values())
        if jobs.source(lake):
            series.expiries = history.expiries(lake)
            series.job_runs = history.job_runs(lake)
            series.job_totals = history.job_totals(lake)
        return series


@dataclass(frozen=True)
class Observation:
    at: datetime
    status: Status | None = None
    series: Series = field(default_factory=Series)
    error: str | None = None  # why status or history could not be read (catalog or source down)
    seconds: float = 0.0  # how long collecting took
    age_seconds: float = 0.0  # how old the answer is (set when it is given)
    slow: str | None = None  # reading the lake and the source is overdue: said, not judged failing


def through_outage(last: Observation, failed: Observation) -> Observation:
    """What a scrape during an outage shows (pure): the last good series, judged failing, the time
    since the last successful load still counting — so the alerts docs/running.md gives (health > 0, that
    age) fire for the outage's length instead of every lake series vanishing with ``up 0``."""
    assert last.status is not None
    judged = health.unreadable(failed.error, failed.at, last.status.health.last_success)
    return replace(last, at=failed.at, status=replace(last.status, health=judged), error=failed.error,
                   seconds=failed.seconds)


OVERDUE_INTERVALS = 3  # an observation the timer could not renew for this many intervals is slow
# a reading of the lake and the source that has not finished in this long is evidence that the
# catalog, the object store or the source does not answer (a slow one, on a busy host, took 52 s)
HUNG_AFTER_SECONDS = 600.0
# how long an answer waits for a reading of a job's new outcome (then the older answer, aged): on a
# busy CI host such a reading took over 5 s, and /healthz answered the outage's "cannot be read" after
# the recovery's load was recorded; within the Kubernetes probe's 25 s (docker/kubernetes/pipeline.yaml)
NEWS_WAIT_SECONDS = 15.0
CLOSE_WAIT_SECONDS = 5.0  # how long close() lets a refresh in flight finish before leaving it


class Observer:
    """The latest observation, refreshed in the background every ``ttl`` seconds once
    started (:meth:`start`; a health probe asked rarely still gets a fresh answer), else when a request
    finds it older than ``ttl``.

    A request is answered from the cache at once, however long a lake read takes on a busy
    machine (one took 5.2 s, past Prometheus's 5 s scrape timeout); only the very first
    request waits for a read. The time since the last successful load is counted to the moment
    of the answer. An observation the timer could not renew for :data:`OVERDUE_INTERVALS`
    intervals is slow, not a failure of the pipeline: it stands, saying how old it is (stale once the
    time since the last success passes the cadence's bound), and fails only after
    :data:`HUNG_AFTER_SECONDS` (a host under CPU pressure failed a healthy pipeline's readiness probe
    at 52 s). One refresh runs at a time;
    :meth:`close` waits for it up to :data:`CLOSE_WAIT_SECONDS` (a refresh takes seconds), so a
    stopping process rarely exits while a thread is inside DuckDB or libpq, and never waits past
    its stop bound for one."""

    def __init__(self, settings: ResolvedSettings, ttl: float = 10.0) -> None:
        self.settings, self.ttl = settings, ttl
        self._lock = threading.Lock()
        self._latest: Observation | None = None
        self._taken = 0.0
        self._refreshing: threading.Thread | None = None
        self._closed = False
        self._timer: threading.Thread | None = None
        self._stopped = threading.Event()
        self._unsubscribe: Callable[[], None] | None = None
        self.refreshes = 0  # observations taken so far

    def observe(self) -> Observation:
        """Read everything once; a failure becomes ``error`` (the server keeps answering)."""

        start, now = time.monotonic(), datetime.now(UTC)
        try:
            status = collect(self.settings)
            series = Series()
            if status.lake_exists:
                # (a lake created between the two reads: nothing to chart yet)
                with contextlib.suppress(LakeNotCreated), \
                        lake_session(self.settings, read_only=True) as lake, one_read(lake):  # one view
                    series = Series.read(lake, [table.name for table in self.settings.tables])
        except Exception as exc:  # noqa: BLE001  a down catalog or source is something to show, not to crash on
            reason = _named(self.settings, exc)
            log.warning("could not observe the pipeline: %s", reason)
            return Observation(now, error=reason or type(exc).__name__, seconds=time.monotonic() - start)
        return Observation(now, status=status, series=series, seconds=time.monotonic() - start)

    def start(self) -> Observer:
        """Refresh every ``ttl`` seconds in the background, from now until :meth:`close`."""
        self._timer = threading.Thread(target=self._tick, name="observe-timer", daemon=True)
        self._timer.start()
        self._unsubscribe = waiting.on_record(self._kick)
        return self

    def _tick(self) -> None:
        self._kick()
        while not self._stopped.wait(self.ttl):
            self._kick()

    def _kick(self, *, for_news: bool = False) -> threading.Thread | None:
        """Start a refresh unless one runs (or the observer closed); the refresh in flight.
        ``for_news``: only while the latest observation predates this process's last recorded outcome
        (checked under the lock: a refresh that ended meanwhile may have read it already)."""
        with self._lock:
            if for_news and not waiting.recorded_after(self._taken):
                return self._refreshing
            if self._refreshing is None and not self._closed:
                # a daemon: a refresh still reading when the process exits must not hold it
                self._refreshing = threading.Thread(target=self._refresh, name="observe", daemon=True)
                self._refreshing.start()
            return self._refreshing

    def latest(self) -> Observation:
        with self._lock:
            stale = self._latest is None or time.monotonic() - self._taken > self.ttl
            # a job of this process recorded its outcome since: the answer must learn of it now
            news = waiting.recorded_after(self._taken)
            # a load that gave up waiting since: the answer must learn of its failure now
            stale = stale or news or waiting.gave_up_after(self._taken) is not None
        pending = self._kick() if stale else None
        with self._lock:
            first = self._latest is None
        if first and pending is not None:
            pending.join()  # nothing to answer from yet
        if news:
            self._await_news(time.monotonic() + NEWS_WAIT_SECONDS)
        with self._lock:
            latest, taken = self._latest, self._taken
        if latest is None:
            return Observation(datetime.now(UTC), error="the server is stopping")
        return self._as_of_now(latest, taken)

    def _await_news(self, deadline: float) -> None:
        """Wait, until ``deadline``, for a reading begun after this process's last recorded outcome: one
        in flight that began before it cannot know of it (a refresh begun during a catalog outage answered
        "the lake cannot be read" after the recovery's load was recorded)."""
        while waiting.recorded_after(self._taken) and (left := deadline - time.monotonic()) > 0:
            pending = self._kick(for_news=True)
            if pending is None:  # closed, or read meanwhile
                return
            pending.join(left)

    def _as_of_now(self, observation: Observation, taken: float) -> Observation:
        """``observation`` answered now: the time since the last success counted to now, what a
        load of this process waits on now, and, when the timer could not renew it for a while,
        failing with its age."""
        status = observation.status
        if status is None:
            return observation
        judged = status.health
        if judged.last_success is not None:
            judged = replace(judged, seconds_since_success=(datetime.now(UTC) - judged.last_success)
                             .total_seconds())
        if waits := waiting.current():  # a load of this process waits (for executors): not healthy
            judged = replace(judged, code=max(judged.code, health.STALE), reasons=[*judged.reasons, *waits])
        if gave_up := waiting.gave_up_after(taken):  # its failure is news this answer predates
            judged = replace(judged, code=health.FAILING, reasons=[*judged.reasons, gave_up])
        age, slow = time.monotonic() - taken, None
        if self._timer is not None and self.ttl and age > OVERDUE_INTERVALS * self.ttl:
            if age > HUNG_AFTER_SECONDS:
                judged = replace(judged, code=health.FAILING, reasons=[
                    *judged.reasons, f"this answer is {age:.0f}s old: reading the lake and the source has "
                    f"not finished in {HUNG_AFTER_SECONDS:.0f}s (refreshed every {self.ttl:g}s); the "
                    "catalog, the object store or the source does not answer"])
            else:
                slow = (f"this answer is {age:.0f}s old: reading the lake and the source is slow (refreshed "
                        f"every {self.ttl:g}s); it stands until a reading finishes")
                judged = health.aged(judged, f"as an answer {age:.0f}s old knows")
        return replace(observation, status=replace(status, health=judged), age_seconds=age, slow=slow)

    def _refresh(self) -> None:
        began = time.monotonic()  # what the observation can know of: the lake as of its start
        observation = self.observe()
        with self._lock:
            if observation.error and self._latest is not None and self._latest.status is not None:
                observation = through_outage(self._latest, observation)
            self._latest, self._taken, self._refreshing = observation, began, None
            self.refreshes += 1
        self._kick(for_news=True)  # an outcome recorded while it read: read again, for it

    def close(self) -> None:
        """Stop refreshing; a refresh in flight gets :data:`CLOSE_WAIT_SECONDS` to finish and is
        then left to end on its own (it only reads): a stop that waited for it waited as long as
        the slowest reading of the lake, past the scheduler's stop bound (exit 1 after 60 s)."""
        self._stopped.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
        with self._lock:
            self._closed, pending = True, self._refreshing
        if pending is not None:
            pending.join(CLOSE_WAIT_SECONDS)
            if pending.is_alive():
                log.info("left a status refresh still reading the lake (read-only) to end with the process")
                process.native_work_left()


def _named(settings: ResolvedSettings, exc: Exception) -> str:
    """Why an observation failed, in the words a load uses: DuckDB's own words for a catalog or an
    object store that went away mid-read are the detail of a line that names it (seen: "Failed to get
    global stats information …: server closed the connection unexpectedly")."""
    detail = scrub_secrets(first_line(exc))
    if not isinstance(exc, duckdb.Error) or not is_transient(exc):
        return detail
    store = store_outage(settings, exc)
    if store is not None:
        return first_line(store)
    return f"Lost the lake catalog (DUCKLAKE_CATALOG={settings.catalog.describe()}) ({detail})"
