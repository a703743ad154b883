"""One pipeline's lifetime: the object a command, a scheduler or a notebook holds.

A :class:`Pipeline` is built once from settings and resolves them once (the embedded Postgres
started, locations made absolute). It owns what lives as long as it does: the engine and the Spark
session it builds, the lake's pooled attach (:mod:`pipeline.lake.instances`), and the checks a load
needs only once (:class:`pipeline.ops.run.Readiness`). Its methods are the operations: ``run`` (one
load with every check), ``load`` (a load that keeps the last one's readiness: a ``--follow`` tick
plans, extracts and promotes, nothing else), ``reconcile``, ``maintain`` and ``status``. Closing it
stops the Spark session it built and lets go of the lake's catalog connections::

    with Pipeline(load_settings(), long_lived=True) as lake:
        lake.load()
"""

from __future__ import annotations

import contextlib
import logging
import threading
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING

from pipeline import embedded
from pipeline.errors import ShutdownRequested
from pipeline.extract.engines import engine_of
from pipeline.lake import instances
from pipeline.ops.run import Engines, Mode, Readiness, RunReport, load
from pipeline.settings import ResolvedSettings, Settings
from pipeline.settings.model import Engine

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.lake.maintain import MaintenanceReport
    from pipeline.lake.verify import Comparison
    from pipeline.ops.proof import RangeCheck
    from pipeline.ops.reconcile import ReconcileReport
    from pipeline.ops.repair import RepairReport
    from pipeline.ops.status import Status


log = logging.getLogger(__name__)


class Pipeline:
    """One source table loaded into one lake, from open to close.

    ``engine``: ``spark`` or ``dlt``. ``long_lived``: this process loads again and again (a
    scheduler, a follower, a notebook): the Spark session is built once, by :meth:`spark_session`,
    and stopped at :meth:`close`; a one-shot run's session is the engine's own, left to the process's
    exit as the JVM's class archive wants."""

    def __init__(self, settings: Settings, *, engine: str = "spark", long_lived: bool = False) -> None:
        self.settings: ResolvedSettings = embedded.resolved(settings)
        self.engine = engine_of(engine)
        self.long_lived = long_lived
        self.stopping = threading.Event()  # set by a stop request: no new Spark session after it
        self._spark: SparkSession | None = None
        self._ready: Readiness | None = None

    # --- lifetime ------------------------------------------------------------------------
    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop the Spark session this pipeline built; the lake's catalog connections close now,
        not at interpreter exit."""
        self.engine_lost()
        instances.drop_all()

    # --- the engine ----------------------------------------------------------------------
    def spark_session(self) -> SparkSession:
        """The pipeline's Spark session, built on first use (refused once a stop was requested:
        an extraction must not start then)."""
        if self._spark is None:
            from pipeline.extract.spark_session import build_session

            self._spark = build_session(self.settings, app_name="event-lake-scheduler",
                                        long_lived=self.long_lived)
        if self.stopping.is_set():
            raise ShutdownRequested("shutdown requested before the extraction started",
                                    "Nothing was staged; the next run extracts this window.")
        return self._spark

    @property
    def spark_started(self) -> bool:
        """Has this pipeline built its Spark session (and not lost it since)?"""
        return self._spark is not None

    def warm_up(self) -> None:
        """Start Spark and run its read and write paths once, so the first load is as fast as the tenth."""
        from pipeline.extract.spark_engine import SparkExtractor

        SparkExtractor(self.spark_session()).warm_up(self.settings)

    def cancel_extraction(self) -> None:
        """Cancel the Spark jobs running now (a stop request); a promotion is not one and runs on."""
        if self._spark is not None:
            from pipeline.extract.spark_session import cancel_jobs

            cancel_jobs(self._spark)

    def engine_lost(self) -> None:
        """Stop the Spark session (a lost Connect server or cluster): the next load builds a new one."""
        spark, self._spark = self._spark, None
        if spark is not None:
            with contextlib.suppress(Exception):
                spark.stop()

    def _engines(self) -> Engines:
        factory = self.spark_session if self.engine is Engine.SPARK and self.long_lived else None
        return Engines(self.engine, None, factory)

    # --- operations ----------------------------------------------------------------------
    def run(self, mode: Mode = "run", *, record_as: str | None = None) -> RunReport:
        """One load with every check first (``mode``: ``run``, ``extract`` or ``promote``);
        ``record_as``: the job name it is recorded under in the job history."""
        self._ready = None
        return self.load(mode, record_as=record_as)

    def load(self, mode: Mode = "run", *, record_as: str | None = None) -> RunReport:
        """One load that keeps the readiness of the last one that succeeded: the watermark, the plan,
        extraction and promotion only. A failure drops it, so the next load checks everything."""
        ready, self._ready = self._ready, None
        report, self._ready = load(self.settings, self._engines(), mode, ready=ready, record_as=record_as)
        return report

    def follow(self) -> None:
        """Load continuously until a stop signal: a load every FOLLOW_EVERY, maintenance between
        (:mod:`pipeline.ops.scheduler`). For a long-lived pipeline."""
        from pipeline.ops.scheduler import Scheduler

        Scheduler(self, follow=True).serve()

    def schedule(self, *, run_now: bool = False) -> None:
        """Load, expire, compact and reconcile on their intervals until a stop signal."""
        from pipeline.ops.scheduler import Scheduler

        Scheduler(self).serve(run_now=run_now)

    def retry_failed(self) -> RunReport:
        """Put the batches set aside back in line and promote them (after their cause was fixed)."""
        from pipeline import staging

        restored = staging.restore_failed(staging.table_dir(self.settings))
        log.info("retrying %d set-aside batch(es): %s", len(restored), ", ".join(restored) or "none")
        return self.run("promote", record_as="promote")

    def reconcile(self) -> ReconcileReport:
        """Backfill what reached the source behind the look-back (:mod:`pipeline.ops.reconcile`)."""
        from pipeline.ops.reconcile import reconcile

        return reconcile(self.settings)

    def reconcile_now(self) -> ReconcileReport:
        """:meth:`reconcile` asked for by hand, recorded in the job history as a scheduler's is."""
        from pipeline.lake import jobs

        with jobs.recorded(self.settings, "reconcile") as details:
            report = self.reconcile()
            details.update(summary=report.summary())
        return report

    def maintain(self, steps: tuple[str, ...] = ("expire", "compact")) -> MaintenanceReport:
        """Expire snapshots older than the retention and/or compact (:mod:`pipeline.lake.maintain`);
        the scheduler holds the job's lock and records it."""
        from pipeline.lake.maintain import run_maintenance

        return run_maintenance(self.settings, self.settings.intervals.retention, steps=steps)

    def compact_if_piled(self, report: RunReport) -> MaintenanceReport | None:
        """Compact now when the load of ``report`` left COMPACT_FILES small files waiting to be
        merged (a ``--run`` from cron each minute made ~10k files a week, and the weekly compaction
        came late), unless another process compacts now; recorded in the job history as a
        scheduler's compaction is. Best effort: the load stands whatever happens here (None:
        nothing done)."""
        from pipeline.errors import LockBusy, first_line
        from pipeline.lake import jobs, locks

        limit = self.settings.intervals.compact_files
        if not limit or report.files_to_merge < limit:
            return None
        log.info("%d small data files wait to be merged (COMPACT_FILES %d): compacting now",
                 report.files_to_merge, limit)
        try:
            with locks.hold(self.settings, "job:compact", timeout=0), \
                    jobs.recorded(self.settings, "compact") as details:
                compacted = self.maintain(("compact",))
                details.update(compacted.as_dict())
            return compacted
        except LockBusy:
            log.info("another process compacts the lake now")
        except Exception as exc:  # noqa: BLE001  the loaded rows stand; the next run or the scheduler merges
            log.warning("compacting after the load failed (%s); the next load tries again", first_line(exc))
        return None

    def maintain_now(self, *, dry_run: bool = False) -> MaintenanceReport:
        """Expire and compact now, unless a scheduler is running either job (then LockBusy);
        recorded in the job history unless a dry run."""
        from pipeline.lake.maintain import maintain_now

        return maintain_now(self.settings, dry_run=dry_run)

    def verify(self) -> Comparison:
        """The lake against the source: counts, distinct ids, checksum (:mod:`pipeline.lake.verify`)."""
        from pipeline.lake.verify import compare

        return compare(self.settings)

    def prove(self, since: timedelta | None) -> RangeCheck:
        """The lake against the source by id over ``since`` before the watermark (None: all), bucket
        by bucket (:func:`pipeline.ops.proof.prove`): no row is read where the buckets agree."""
        from pipeline.ops.proof import prove

        return prove(self.settings, since)

    def repair(self, since: timedelta | None) -> RepairReport:
        """Replace the lake's rows of every id that differs from the source over ``since`` (None:
        all) by the source's, in one snapshot (:mod:`pipeline.ops.repair`)."""
        from pipeline.ops.repair import repair

        return repair(self.settings, since)

    def status(self) -> Status:
        """Watermark, lag, batches, jobs and health (:mod:`pipeline.ops.status`)."""
        from pipeline.ops.status import collect

        return collect(self.settings)
