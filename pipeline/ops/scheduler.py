"""``--schedule``: hourly loads, daily snapshot expiry, weekly compaction, for months unattended.

* A job never runs twice at once, across processes too: each run holds the advisory lock
  ``job:<name>``; a second scheduler finds it taken and skips that tick.
* Jobs run one at a time in this process, so an overrunning load delays the others instead
  of stacking, and ``schedule`` computes the next run from when a job ends: missed ticks are
  not replayed in a burst.
* A failure is logged, recorded in the job history and retried at a later tick; how much later
  depends on the error's type (:mod:`.policy`). The process stays up (catalog or source down).
* SIGTERM/SIGINT: no new jobs; a running Spark extraction is cancelled (its batch has no
  manifest, so it is never promoted); a running promotion commits or rolls back; exit 0
  within :data:`SHUTDOWN_SECONDS`, or exit 1 when that bound forces the stop.
* Next runs come from the job history: a restart keeps each job's cadence (an overdue job runs at start).
* While it runs, ``/metrics``, ``/healthz`` and the dashboard are served on METRICS_PORT
  (:mod:`.web`); 0 turns that off.

Job locks are taken in :mod:`pipeline.lake.locks` (``job:<name>``, without waiting).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import schedule

from pipeline import logs, waiting
from pipeline.errors import (
    CatalogUnavailable,
    EngineUnavailable,
    LakeNotCreated,
    LockBusy,
    PipelineError,
    SourceUnavailable,
    first_line,
    is_transient,
)
from pipeline.lake import jobs, locks
from pipeline.lake.jobs import JobStatus
from pipeline.lake.maintain import Step, compaction_due
from pipeline.ops import scheduler_state
from pipeline.ops.policy import (
    CANCEL_EVERY_SECONDS,
    FOLLOW_MAX_BACKOFF,
    MAX_BACKOFF,
    SHUTDOWN_SECONDS,
    needs_a_fix,
    retry_delay,
    sooner_than_the_interval,
)
from pipeline.ops.scheduler_state import PlannedJob, SchedulerState
from pipeline.process import on_stop
from pipeline.settings.durations import format_duration
from pipeline.settings.model import Engine

if TYPE_CHECKING:
    from pipeline.lake.maintain import MaintenanceReport
    from pipeline.load.reconcile import ReconcileReport
    from pipeline.load.report import RunReport
    from pipeline.ops.web import WebServer
    from pipeline.settings import ResolvedSettings

log = logging.getLogger(__name__)


class Lifetime(Protocol):
    """What the scheduler drives: one pipeline's lifetime (:class:`pipeline.ops.pipeline.Pipeline`),
    named by what it does so the pipeline can offer ``follow()`` without the two importing each other."""

    settings: ResolvedSettings
    engine: Engine
    stopping: threading.Event

    def load(self, *, count_unmerged: bool = ...) -> RunReport: ...
    def maintain(self, steps: tuple[Step, ...] = ...) -> MaintenanceReport: ...
    def reconcile(self) -> ReconcileReport: ...
    def warm_up(self) -> None: ...
    @property
    def spark_started(self) -> bool: ...
    def cancel_extraction(self) -> None: ...
    def engine_lost(self) -> None: ...


FOLLOW_COMPACT_EVERY = timedelta(minutes=5)  # --follow: small files merged at least this often
FOLLOW_RECORD_EVERY = timedelta(minutes=1)  # --follow: a load record in the job history this often
UNRECORDED_KEPT = 100  # job history rows kept while the catalog is away, written once it is back
TICK_SLACK_SECONDS = 0.5  # a retry due this close to a tick runs at that tick
PROBE_EVERY_SECONDS = 2.0  # a follower backing off asks the services this often whether they are back
FOLLOW_FINISH_SECONDS = 15  # --follow: after SIGTERM, the micro-batch in flight may finish this long


@dataclass(frozen=True)
class JobResult:
    """What one run of a job did: a line for the log, the counters a follower adds up, and the
    details the job history keeps (JSON in ``ops.job_runs``)."""

    summary: str
    details: Mapping[str, Any] = field(default_factory=dict)
    rows_in_window: int | None = None  # a load's counters (None: a job that loads nothing)
    rows_inserted: int | None = None
    files_to_merge: int = 0  # a load's: small data files waiting to be merged after it

    def record(self) -> dict[str, object]:
        """The history's details: the job's own, a load's counters and the summary line."""
        counters = {"rows_in_window": self.rows_in_window, "rows_inserted": self.rows_inserted}
        counted = {key: value for key, value in counters.items() if value is not None}
        return {**self.details, **counted, "summary": self.summary}


SKIPPED = JobResult("another process is running this job", {"reason": "another process is running this job"})


@dataclass(frozen=True)
class Attempt:
    """One run of a job, as the job history records it (``result`` None: it failed)."""

    started: datetime
    finished: datetime
    status: JobStatus
    error: str | None
    result: JobResult | None
    seconds: float
    loads: int = 1  # how many follower loads this record stands for
    loads_succeeded: int | None = None  # of those (None: one attempt, its status says)
    seconds_all_loads: float | None = None

    @staticmethod
    def merge(attempts: list[Attempt]) -> Attempt:
        """Many loads of ``--follow`` as one record, and it says so: their span, the last one's
        outcome and duration (a load's, not the minute's), how many loads and how many of them
        succeeded (the history's counters count loads), the sums of their rows."""
        last = attempts[-1]
        done = [a.result for a in attempts if a.result is not None]
        read = sum(r.rows_in_window or 0 for r in done)
        inserted = sum(r.rows_inserted or 0 for r in done)
        latest = last.result.summary if last.result else last.error
        base = last.result.details if last.result else {}
        merged = JobResult(f"{len(attempts)} load(s): {read} rows read, {inserted} inserted; last: {latest}",
                           base, read, inserted)
        return Attempt(attempts[0].started, last.finished, last.status, last.error, merged, last.seconds,
                       len(attempts), sum(a.status is JobStatus.SUCCESS for a in attempts),
                       round(sum(a.seconds for a in attempts), 3))

    def record(self) -> dict[str, object]:
        """The history row's details."""
        details = self.result.record() if self.result else {}
        if self.loads_succeeded is not None:
            details.update(loads=self.loads, loads_succeeded=self.loads_succeeded,
                           seconds_all_loads=self.seconds_all_loads)
        return {**details, "seconds": round(self.seconds, 3)}


@dataclass
class Job:
    """One scheduled job and its failure streak."""

    name: str
    every: timedelta
    action: Callable[[], JobResult]
    failures: int = 0
    not_before: float = 0.0
    last_status: str | None = None
    last_finished: str | None = None
    service_down: bool = False  # its last failure was a service away (a probe may end the backoff)
    retry_in: timedelta | None = None  # the next attempt this long after a failure, before the interval


class Scheduler:
    """Runs a :class:`~pipeline.ops.pipeline.Pipeline`'s jobs on their intervals (or, following,
    its loads back to back) until stopped; the pipeline owns the sessions and is closed by its owner."""

    def __init__(self, pipeline: Lifetime, *, follow: bool = False) -> None:
        self.pipeline = pipeline
        self.settings = pipeline.settings
        self.intervals, self.follow = self.settings.intervals, follow
        self.stop = pipeline.stopping
        self._unrecorded: list[jobs.JobRecord] = []
        self.jobs = {
            "load": Job("load", self.intervals.follow if follow else self.intervals.load, self._load),
            "expire": Job("expire", self.intervals.expire, self._expire),
            # following makes a file per load: merged every few minutes, not once a week
            "compact": Job("compact", min(self.intervals.compact, FOLLOW_COMPACT_EVERY) if follow
                           else self.intervals.compact, self._compact),
            "reconcile": Job("reconcile", self.intervals.reconcile, self._reconcile),
        }
        self.scheduler = schedule.Scheduler()
        for job in self.jobs.values():
            if not (follow and job.name == "load"):  # following loads on its own clock (serve)
                self.scheduler.every(max(1, int(job.every.total_seconds()))).seconds.do(self.tick, job)

    # --- job actions -------------------------------------------------------------------
    def resume_from_history(self) -> None:
        """Each job's next run from its last run in the job history (scheduled or manual), so daily and
        weekly jobs keep their cadence across restarts instead of counting from this process's
        start; an overdue job, or one this lake never ran, runs now — on a lake not created yet,
        every job (the load first). With the catalog away: intervals count from now."""
        from pipeline.lake.connect import lake_session

        try:
            with lake_session(self.settings, read_only=True) as lake:
                last = {r["job"]: r["finished_at"] for r in jobs.last_runs(lake)}
        except LakeNotCreated:
            last = {}  # a new lake never ran any job
        except Exception as exc:  # noqa: BLE001  the catalog is away: count from now
            log.info("no job history to resume from (%s); counting intervals from now", first_line(exc))
            return
        now = datetime.now(UTC)
        for entry in self.scheduler.jobs:
            job = _job_of(entry)
            # a job this lake never ran is overdue
            wait = max(timedelta(0), last[job.name] + job.every - now) if job.name in last else timedelta(0)
            entry.next_run = datetime.now() + wait  # schedule keeps naive local times
            log.info("job %s last ran %s; next run in %.0fs", job.name,
                     last[job.name].isoformat() if job.name in last else "never", wait.total_seconds())

    def warm_up(self) -> None:
        """Start Spark and run its read and write paths once now, so the first load is as fast
        as the tenth (best effort: a failure here is logged, and the load job reports its own)."""
        t0 = time.monotonic()
        try:
            self.pipeline.warm_up()
        except Exception as exc:  # noqa: BLE001  the loads report real problems with their own errors
            if not self.stop.is_set():
                log.warning("Spark warm-up failed (%s); the first load pays the JVM's start instead",
                            first_line(exc))
            return
        log.info("Spark warmed up in %.1fs (JVM start, one read and write of the source)",
                 time.monotonic() - t0)

    def _load(self) -> JobResult:
        with logs.routine() if self.follow else contextlib.nullcontext():
            # a follower merges every few minutes on its own clock: no file count each tick
            report = self.pipeline.load(count_unmerged=not self.follow)
        return JobResult(report.summary(), {"snapshots": report.snapshots}, report.rows_in_window,
                         report.rows_inserted, report.files_to_merge)

    def _expire(self) -> JobResult:
        report = self.pipeline.maintain((Step.EXPIRE,))
        return JobResult(report.describe(), report.as_dict())

    def _compact(self) -> JobResult:
        report = self.pipeline.maintain((Step.COMPACT,))
        return JobResult(report.describe(), report.as_dict())

    def _reconcile(self) -> JobResult:
        report = self.pipeline.reconcile()
        return JobResult(report.summary(), report.as_dict())

    # --- running -----------------------------------------------------------------------
    def tick(self, job: Job) -> None:
        """Run ``job`` once, unless shutting down, backing off, or running elsewhere; record it.
        A scheduled load that inserted rows is followed by a compaction when small files piled up
        past COMPACT_FILES (a short LOAD_EVERY made ~10k files before the weekly one)."""
        attempt = self._attempt(job)
        if attempt is not None:
            self._record(job, attempt)
        piled = attempt.result.files_to_merge if attempt is not None and attempt.result is not None else 0
        if job.name == "load" and compaction_due(piled, self.settings.intervals.compact_files):
            self.tick(self.jobs["compact"])

    def _attempt(self, job: Job) -> Attempt | None:
        """Run ``job`` once and log the outcome (None: not run now)."""
        if self.stop.is_set():
            return None
        following = self.follow and job.name == "load"  # every few seconds: the outcome is enough
        if time.monotonic() < job.not_before:
            log.log(logging.DEBUG if following else logging.INFO,
                    "job %s: backing off after %d failure(s), next attempt in %.0fs",
                    job.name, job.failures, job.not_before - time.monotonic())
            return None
        started, t0 = datetime.now(UTC), time.monotonic()
        finished: datetime | None = None
        log.log(logging.DEBUG if following else logging.INFO, "job %s started", job.name)
        status, error, result = JobStatus.SUCCESS, None, None
        failure: BaseException | None = None
        try:
            with locks.hold(self.settings, f"job:{job.name}", timeout=0):
                # history times are taken while holding the lock, so runs of one job recorded
                # by different processes never appear to overlap
                started = datetime.now(UTC)
                result = job.action()
                finished = datetime.now(UTC)
        except LockBusy:
            status, result = JobStatus.SKIPPED, SKIPPED
        except Exception as exc:  # noqa: BLE001  any failure is recorded; the process must stay up
            exc = self._named(exc)
            status, error, failure = JobStatus.FAILED, first_line(exc), exc
            if isinstance(exc, EngineUnavailable):  # a lost Connect server or cluster: a new session next
                self.pipeline.engine_lost()
            if self.stop.is_set():
                status, error = JobStatus.CANCELLED, f"stopped by shutdown: {error}"
        seconds = time.monotonic() - t0
        if status is JobStatus.FAILED and failure is not None:
            job.failures += 1
            # the probe that ends a backoff early asks the source and the catalog: only their
            # outage is one it can see end (a load past LOAD_TIMEOUT while both answered was
            # retried within a second of each "retry in 32s")
            job.service_down = isinstance(failure, (SourceUnavailable, CatalogUnavailable)) or (
                not isinstance(failure, PipelineError) and is_transient(failure))
            cap = FOLLOW_MAX_BACKOFF if following else MAX_BACKOFF
            delay = retry_delay(job.every, job.failures, failure, cap)
            # the next attempt is the first tick at least delay + one interval from now, as logged;
            # a table not made yet is looked for sooner than a long interval (_run_pending moves it)
            job.retry_in = sooner_than_the_interval(job.every, failure)
            wait = job.retry_in or delay + job.every
            job.not_before = time.monotonic() + wait.total_seconds() - TICK_SLACK_SECONDS \
                if delay or job.retry_in else 0.0
            kind = "needs a fix" if needs_a_fix(failure) else "temporary"
            when = f"in {format_duration(wait)}" if delay or job.retry_in else "at next tick"
            log.error("job %s failed after %.1fs (%s; %d in a row; retry %s): %s", job.name, seconds, kind,
                      job.failures, when, error)
        else:
            job.failures, job.not_before = 0, 0.0
            quiet = self.follow and job.name == "load"  # a summary a minute instead (see _follow)
            log.log(logging.DEBUG if quiet else logging.INFO, "job %s %s in %.1fs: %s", job.name, status,
                    seconds, error if status is JobStatus.CANCELLED or result is None else result.summary)
        job.last_status, job.last_finished = status, datetime.now(UTC).isoformat()
        return Attempt(started, finished or datetime.now(UTC), status, error, result, seconds)

    def _named(self, exc: Exception) -> Exception:
        """A service lost under a job, as DuckDB words it ("TransactionContext Error: Failed to commit…",
        "Failed to get global stats information from DuckLake…"): named as the catalog or object store
        it is, temporary. Anything else as it is."""
        import duckdb

        if isinstance(exc, duckdb.Error) and is_transient(exc):
            from pipeline.promote.group import promotion_outage

            return promotion_outage(self.settings, exc)
        return exc

    def _record(self, job: Job, attempt: Attempt, every: timedelta | None = None) -> None:
        """Write the run to the job history; one that could not be written (the catalog was away:
        the very outage a failed load reports) is kept and written first once the catalog is back,
        so the failures are counted (``job_runs_total{status="failed"}``) and the alerts fire."""
        following = self.follow and job.name == "load"
        record = jobs.JobRecord(
            job.name, attempt.started, attempt.finished, attempt.status, attempt.error,
            {**attempt.record(),
             # --status judges staleness by the interval the scheduler ran with (a
             # follower's: its FOLLOW_EVERY, and how often it writes this record)
             "every_seconds": (every or job.every).total_seconds(),
             **({"follow_every_seconds": job.every.total_seconds()} if following else {}),
             # the tables a load loads: another table's success is none of a table it did not list
             **({"tables": [table.name for table in self.settings.tables]} if job.name == "load" else {})})
        self._unrecorded.append(record)
        history = jobs.JobHistory(self.settings)
        while self._unrecorded:
            if not history.write(self._unrecorded[0]):
                del self._unrecorded[:-UNRECORDED_KEPT]  # the newest are kept
                break
            self._unrecorded.pop(0)
            waiting.recorded()  # this process's /healthz reads the lake's record again
        self.write_state()

    def _follow(self) -> None:
        """Load every FOLLOW_EVERY, start to start (a load that takes longer is followed at once),
        with the other jobs between loads. The job history gets one load record a minute (the
        loads and rows since), or at once when a load fails and when the next one succeeds, not
        one every two seconds."""
        load = self.jobs["load"]
        tally: list[Attempt] = []
        next_load = time.monotonic()
        last_record = next_load - FOLLOW_RECORD_EVERY.total_seconds()  # the first load is recorded at once
        last_probe = 0.0
        first = True
        recovering = False  # the last record was a failure
        while not self.stop.is_set():
            now = time.monotonic()
            if load.service_down and load.not_before > now and now - last_probe >= PROBE_EVERY_SECONDS:
                last_probe = now
                if self._services_answer():  # back: load now, not at the end of the backoff
                    log.info("the services answer again; loading now")
                    load.not_before, load.service_down, next_load = 0.0, False, now
            if now >= next_load:
                next_load = now + load.every.total_seconds()
                attempt = self._attempt(load)
                if attempt is not None:
                    tally.append(attempt)
                    due = now - last_record >= FOLLOW_RECORD_EVERY.total_seconds()
                    failed = attempt.status is JobStatus.FAILED
                    # a failure is recorded at once, and so is the first success after one: the
                    # health of --status and /healthz said "failing" for up to a minute after recovery
                    if failed or due or recovering:
                        recovering = failed
                        merged = Attempt.merge(tally)
                        log.info("following: %s", merged.result.summary if merged.result else merged.error)
                        self._record(load, merged, FOLLOW_RECORD_EVERY)
                        tally, last_record = [], now
                if first:
                    # a restarted follower loads (and records) first (a load with rows starts Spark
                    # itself; one with none needs no Spark), then warms Spark if that load did not:
                    # warming first held its first load back 23-46 s on a busy machine
                    first = False
                    if self.pipeline.engine is Engine.SPARK and not self.pipeline.spark_started \
                            and not self.stop.is_set():
                        self.warm_up()
            try:
                self._run_pending()
            except Exception:
                log.exception("unexpected error in the scheduler loop; carrying on")
            self.stop.wait(max(0.0, min(next_load - time.monotonic(), 1.0)))
        if tally:
            self._record(load, Attempt.merge(tally), FOLLOW_RECORD_EVERY)

    def _services_answer(self) -> bool:
        """Do the source and a Postgres catalog accept a connection now (a probe of seconds)?"""
        import psycopg

        targets = [self.settings.source_dsn, self.settings.catalog.pg]
        try:
            for dsn in filter(None, targets):
                with psycopg.connect(dsn.conninfo(), connect_timeout=3):
                    pass
        except psycopg.Error:
            return False
        return True

    def _run_pending(self) -> None:
        """Run the jobs that are due; the state file then shows their next runs (the schedule
        sets them after a job returns, later than the job's own record wrote the state)."""
        ran = any(entry.should_run for entry in self.scheduler.jobs)
        self.scheduler.run_pending()
        for entry in self.scheduler.jobs:  # a retry sooner than the interval the schedule just set
            job = _job_of(entry)
            if job.retry_in is not None:
                entry.next_run, job.retry_in = datetime.now() + job.retry_in, None
        if ran:
            self.write_state()

    def write_state(self) -> None:
        """Next run times for ``--status`` (best effort)."""
        by_job = {_job_of(j).name: j.next_run.astimezone().isoformat()
                  for j in self.scheduler.jobs if j.next_run}
        state = SchedulerState(
            pid=os.getpid(), run_id=logs.RUN_ID, updated_at=datetime.now(UTC).isoformat(),
            mode="follower" if self.follow else "scheduler",
            jobs={name: PlannedJob(every=format_duration(job.every), next_run=by_job.get(name),
                                   last_status=job.last_status, last_finished=job.last_finished,
                                   consecutive_failures=job.failures)
                  for name, job in self.jobs.items()})
        scheduler_state.SchedulerStates(self.settings.home).write(state)

    def request_stop(self) -> None:
        if self.stop.is_set():
            return
        log.info("shutdown requested: no new jobs; %s the current one (at most %ds)",
                 "finishing the micro-batch in flight, else cancelling" if self.follow
                 else "finishing or cancelling", SHUTDOWN_SECONDS)
        self.stop.set()
        threading.Thread(target=self._cancel_and_watch, daemon=True).start()

    def _cancel_and_watch(self) -> None:
        """Cancel Spark jobs until the process ends (a job submitted just after one round, or a
        session still being built when the signal came, is caught by the next round); a
        promotion (DuckDB) is not a Spark job and runs on. Following, a micro-batch in flight
        (seconds of rows) gets :data:`FOLLOW_FINISH_SECONDS` to finish first. Past the bound,
        exit regardless."""
        deadline = time.monotonic() + SHUTDOWN_SECONDS
        if self.follow:
            time.sleep(FOLLOW_FINISH_SECONDS)
        while time.monotonic() < deadline:
            self.pipeline.cancel_extraction()
            time.sleep(CANCEL_EVERY_SECONDS)
        log.error("shutdown took longer than %ds; exiting now with status 1 (an open transaction "
                  "rolls back)%s", SHUTDOWN_SECONDS, self._where_stuck())
        os._exit(1)  # a forced stop is not a clean one: process managers must see the difference

    def _where_stuck(self) -> str:
        """Every thread's stack in a file under the logs folder, so a stop that hung can be
        explained afterwards (it was not, twice, without one); the log line names the file."""
        import faulthandler

        path = self.settings.home / "logs" / f"stuck-{os.getpid()}.txt"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w") as out:
                faulthandler.dump_traceback(out, all_threads=True)
        except OSError:
            return ""
        return f"; where each thread was: {path}"

    def serve(self, run_now: bool = False) -> None:
        on_stop(self.request_stop)
        log.info("%s up: load every %s, expire every %s (retention %s), compact every %s, "
                 "reconcile every %s (over %s)", "follower" if self.follow else "scheduler",
                 format_duration(self.jobs["load"].every),
                 format_duration(self.intervals.expire), format_duration(self.intervals.retention),
                 format_duration(self.jobs["compact"].every), format_duration(self.intervals.reconcile),
                 format_duration(self.intervals.reconcile_since) if self.intervals.reconcile_since else "all")
        web = self._start_web()
        self.resume_from_history()
        if self.pipeline.engine is Engine.SPARK and not self.follow:
            self.warm_up()  # a follower loads first and warms after (see _follow)
        if self.follow:
            self.write_state()
            self._follow()
        elif run_now:
            self.tick(self.jobs["load"])
            for entry in self.scheduler.jobs:  # the next load counts from this one
                if _job_of(entry).name == "load":
                    entry.next_run = datetime.now() + self.jobs["load"].every
        self.write_state()
        while not self.stop.is_set() and not self.follow:
            try:
                self._run_pending()
            except Exception:
                log.exception("unexpected error in the scheduler loop; carrying on")
            idle = self.scheduler.idle_seconds
            self.stop.wait(min(1.0, max(0.05, idle if idle is not None else 1.0)))
        if web is not None:  # first: its threads may be inside DuckDB; none may outlive the process
            web.stop()
        # the pipeline is its owner's to close (Spark, the lake's attaches): serve() only drove it
        scheduler_state.SchedulerStates(self.settings.home).remove()
        log.info("scheduler stopped cleanly")

    def _start_web(self) -> WebServer | None:
        """/metrics, /healthz and the dashboard on METRICS_PORT; a busy port costs the metrics,
        never the loads (a second scheduler on the host is allowed)."""
        if not self.settings.metrics_port:
            return None
        from pipeline.ops.web import WebServer

        try:
            return WebServer(self.settings).start()
        except PipelineError as exc:
            log.error("not serving metrics: %s (%s)", exc, exc.hint)
            return None



def _job_of(entry: schedule.Job) -> Job:
    """The :class:`Job` a ``schedule`` entry runs (its one argument to :meth:`Scheduler.tick`)."""
    assert entry.job_func is not None, "every entry is made with do(self.tick, job)"
    return entry.job_func.args[0]
