"""One pipeline's lifetime: the object a command, a scheduler or a notebook holds.

A :class:`Pipeline` is built once from settings and resolves them once (the embedded Postgres
started, locations made absolute). It owns what lives as long as it does: the engine and the Spark
session it builds, the lake's pooled attach (:mod:`pipeline.lake.instances`), and the checks a load
needs only once (:class:`pipeline.load.run.Readiness`). Its methods are the operations: ``run`` (one
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
import time
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING

from pipeline import embedded
from pipeline.errors import ConfigError, ShutdownRequested
from pipeline.extract.engines import engine_of
from pipeline.lake import instances, jobs, locks
from pipeline.lake.connect import lake_session
from pipeline.lake.maintain import BOTH, Step, compaction_due, run_maintenance
from pipeline.load.report import RunReport
from pipeline.load.run import Engines, Loader, Readiness, RunMode, run_mode
from pipeline.settings import ResolvedSettings, Settings
from pipeline.settings.model import Engine

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql import SparkSession

    from pipeline.erase.erasure import ErasureReport
    from pipeline.extract.spark_lease import SparkLease
    from pipeline.lake.maintain import MaintenanceReport
    from pipeline.lake.tombstones import Receipt
    from pipeline.load.proof import ImageCheck
    from pipeline.load.reconcile import ReconcileReport
    from pipeline.load.repair import RepairReport
    from pipeline.load.verify import ImageComparison
    from pipeline.ops.status import Status


log = logging.getLogger(__name__)
ERASE_WAIT = 600  # seconds an erasure waits for a running expiry or compaction to end


class LakeAt:
    """The lake at one snapshot (``Pipeline.at(version=3)``): read-only SQL as of then."""

    def __init__(self, pipeline: Pipeline, version: int | None, time: str | None) -> None:
        self.pipeline, self.version, self.time = pipeline, version, time

    def sql(self, query: str, params: list[object] | dict[str, object] | None = None) -> pa.Table:
        from pipeline.sql_session.query import arrow_query

        return arrow_query(self.pipeline.settings, query, params, at_version=self.version, at_time=self.time)


class Pipeline:
    """One source table loaded into one lake, from open to close.

    ``engine``: ``spark`` or ``dlt``. ``long_lived``: this process loads again and again (a
    scheduler, a follower, a notebook): the Spark session is built once, by :meth:`spark_session`,
    and stopped at :meth:`close`; a one-shot run's session is the engine's own, left to the process's
    exit as the JVM's class archive wants."""

    def __init__(self, settings: Settings, *, engine: str = "spark", long_lived: bool = False,
                 spark: SparkSession | None = None) -> None:
        """``spark``: a session of the caller's to extract with (used, never stopped); by default
        the pipeline takes one of its own (:mod:`pipeline.extract.spark_lease`)."""
        self.settings: ResolvedSettings = embedded.resolved(settings)
        self.engine = engine_of(engine)
        self.long_lived = long_lived
        self.stopping = threading.Event()  # set by a stop request: no new Spark session after it
        self._given_spark = spark
        self._lease: SparkLease | None = None
        self._ready: Readiness | None = None
        self._pool = instances.Pool()  # this pipeline's lake attaches, closed with it

    def sibling(self, settings: Settings) -> Pipeline:
        """A pipeline of other settings on this one's engine and the caller's Spark session (if
        one was given): it closes only what it opens, as any pipeline."""
        return Pipeline(settings, engine=self.engine, long_lived=self.long_lived, spark=self._given_spark)

    # --- lifetime ------------------------------------------------------------------------
    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """End the Spark session this pipeline took (the process's Spark stops with the last one,
        if a pipeline started it) and close this pipeline's lake attaches now, not at interpreter
        exit. Another pipeline's session and attaches stay open."""
        self.engine_lost()
        self._pool.drop_all()

    @contextlib.contextmanager
    def _own(self) -> Iterator[None]:
        """The block's lake sessions are this pipeline's (its pool)."""
        with instances.using(self._pool):
            yield

    # --- the engine ----------------------------------------------------------------------
    def spark_session(self) -> SparkSession:
        """The pipeline's Spark session: the caller's, or its own, taken on first use (refused once
        a stop was requested: an extraction must not start then)."""
        if self.stopping.is_set():
            raise ShutdownRequested("shutdown requested before the extraction started",
                                    "Nothing was staged; the next run extracts this window.")
        if self._given_spark is not None:
            return self._given_spark
        if self._lease is None:
            from pipeline.extract.spark_lease import SparkLease

            self._lease = SparkLease.take(self.settings, "event-lake-scheduler", long_lived=self.long_lived)
        return self._lease.session

    @property
    def spark_started(self) -> bool:
        """Has this pipeline a Spark session now (the caller's, or one it took and has not lost)?"""
        return self._given_spark is not None or self._lease is not None

    def warm_up(self) -> None:
        """Start Spark and run its read and write paths once, so the first load is as fast as the tenth."""
        from pipeline.extract.spark_engine import SparkExtractor

        SparkExtractor(self.spark_session()).warm_up(self.settings)

    def cancel_extraction(self) -> None:
        """Cancel the Spark jobs running now (a stop request); a promotion is not one and runs on."""
        spark = self._given_spark or (self._lease.session if self._lease is not None else None)
        if spark is not None:
            from pipeline.extract.spark_session import cancel_jobs

            cancel_jobs(spark)

    def engine_lost(self) -> None:
        """End the Spark session this pipeline took (a lost Connect server or cluster): the next
        load takes a new one. A caller's session is the caller's to stop."""
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()

    def _engines(self) -> Engines:
        if self._given_spark is not None:
            return Engines(self.engine, self._given_spark, None)
        factory = self.spark_session if self.engine is Engine.SPARK and self.long_lived else None
        return Engines(self.engine, None, factory)

    # --- operations ----------------------------------------------------------------------
    def run(self, mode: RunMode | str = RunMode.RUN, *, record_as: str | None = None) -> RunReport:
        """One load with every check first (``mode``: ``run``, ``extract`` or ``promote``);
        ``record_as``: the job name it is recorded under in the job history."""
        self._ready = None
        return self.load(mode, record_as=record_as)

    def load(self, mode: RunMode | str = RunMode.RUN, *, record_as: str | None = None,
             count_unmerged: bool = True) -> RunReport:
        """One load that keeps the readiness of the last one that succeeded: the watermark, the plan,
        extraction and promotion only. A failure drops it, so the next load checks everything.
        ``count_unmerged``: count the small files waiting to be merged after it (for COMPACT_FILES;
        a follower, which merges on its own clock, does not)."""
        ready, self._ready = self._ready, None
        with self._own():
            report, self._ready = Loader(self.settings, self._engines()).load(
                run_mode(mode), ready=ready, record_as=record_as, count_unmerged=count_unmerged)
        return report

    def follow(self) -> None:
        """Load continuously until a stop signal: a load every FOLLOW_EVERY, maintenance between
        (:mod:`pipeline.ops.scheduler`). For a long-lived pipeline."""
        from pipeline.ops.scheduler import Scheduler

        with self._own():
            Scheduler(self, follow=True).serve()

    def schedule(self, *, run_now: bool = False) -> None:
        """Load, expire, compact and reconcile on their intervals until a stop signal."""
        from pipeline.ops.scheduler import Scheduler

        with self._own():
            Scheduler(self).serve(run_now=run_now)

    def retry_failed(self) -> RunReport:
        """Put the batches set aside back in line and promote them (after their cause was fixed)."""
        from pipeline import staging

        restored = [batch for table in self.settings.tables
                    for batch in staging.restore_failed(staging.table_dir(self.settings, table))]
        log.info("retrying %d set-aside batch(es): %s", len(restored), ", ".join(restored) or "none")
        return self.run("promote", record_as="promote")

    def reconcile(self) -> ReconcileReport:
        """Backfill what reached the source behind the look-back (:mod:`pipeline.load.reconcile`)."""
        from pipeline.load.reconcile import reconcile

        with self._own():
            return reconcile(self.settings)

    def reconcile_now(self) -> ReconcileReport:
        """:meth:`reconcile` asked for by hand, recorded in the job history as a scheduler's is."""
        with self._own(), jobs.JobHistory(self.settings).recorded("reconcile") as details:
            report = self.reconcile()
            details.update(summary=report.summary())
        return report

    def maintain(self, steps: tuple[Step, ...] = BOTH) -> MaintenanceReport:
        """Expire snapshots older than the retention and/or compact (:mod:`pipeline.lake.maintain`);
        the scheduler holds the job's lock and records it."""
        with self._own():
            return run_maintenance(self.settings, self.settings.intervals.retention, steps=steps)

    def compact_if_piled(self, report: RunReport) -> MaintenanceReport | None:
        """Compact now when the load of ``report`` left COMPACT_FILES small files waiting to be
        merged (a ``--run`` from cron each minute made ~10k files a week, and the weekly compaction
        came late), unless another process compacts now; recorded in the job history as a
        scheduler's compaction is. Best effort: the load stands whatever happens here (None:
        nothing done)."""
        from pipeline.errors import LockBusy, first_line

        if not compaction_due(report.files_to_merge, self.settings.intervals.compact_files):
            return None
        try:
            with self._own(), locks.hold(self.settings, "job:compact", timeout=0), \
                    jobs.JobHistory(self.settings).recorded("compact") as details:
                compacted = self.maintain((Step.COMPACT,))
                details.update(compacted.as_dict())
            return compacted
        except LockBusy:
            log.info("another process compacts the lake now")
        except Exception as exc:  # noqa: BLE001  the loaded rows stand; the next run or the scheduler merges
            log.warning("compacting after the load failed (%s); the next load tries again", first_line(exc))
        return None

    def maintain_now(self, *, dry_run: bool = False) -> MaintenanceReport:
        """``--maintain``: expire and compact now, unless a scheduler is running either job (then
        :class:`~pipeline.errors.LockBusy` says so, and nothing is done twice); recorded in the job
        history unless a dry run (it changes nothing)."""
        settings = self.settings
        with self._own(), locks.hold(settings, "job:expire", timeout=0), \
                locks.hold(settings, "job:compact", timeout=0), \
                jobs.JobHistory(settings).recorded(None if dry_run else "maintain") as details:
            report = run_maintenance(settings, settings.intervals.retention, dry_run=dry_run)
            details.update(report.as_dict())
        return report

    def erase(self, value: str, *, dry_run: bool = False) -> ErasureReport:
        """``--erase``: remove ``value``'s rows (SUBJECT_KEY) from every table, snapshot, file and the
        catalog, never to be loaded again, with a receipt (:mod:`pipeline.erase.erasure`); with
        ``dry_run``, only what it would do. Waits for a running expiry or compaction (they rewrite
        the same files); recorded in the job history (the receipt, never the value)."""
        from pipeline.erase.catalog_vacuum import vacuum_catalog
        from pipeline.erase.erasure import finish, run_erasure
        from pipeline.progress import Progress

        settings, started = self.settings, time.monotonic()
        meter = Progress("erasure" + (" (dry run)" if dry_run else ""))
        with self._own(), locks.hold(settings, "job:expire", timeout=ERASE_WAIT), \
                locks.hold(settings, "job:compact", timeout=ERASE_WAIT), \
                jobs.JobHistory(settings).recorded(None if dry_run else "erase") as details, meter.ticking():
            with lake_session(settings, tables=True) as lake:
                report = run_erasure(lake, settings, value, dry_run=dry_run, step=meter.step)
            if report.finishing:
                # this pipeline's own catalog connections would hold VACUUM FULL back: closed first
                instances.drop_all()
                meter.step("vacuuming the catalog")
                report.catalog_vacuum = vacuum_catalog(settings)
                with lake_session(settings) as lake:
                    finish(lake, report)
                # last: the receipts' own commit wrote new versions of catalog rows (a vacuum early in
                # the erasure does not cover writes made later in it)
                instances.drop_all()
                meter.step("vacuuming the catalog after the receipt's commit")
                if (last := vacuum_catalog(settings)) != report.catalog_vacuum:
                    log.warning("the catalog's last vacuum, after the receipt was written: %s", last)
            report.seconds = time.monotonic() - started
            details.update(report.as_dict())
        meter.finish(note=f"{report.rows} row(s)")
        return report

    def erasures(self) -> list[Receipt]:
        """``--erasures``: every erasure's receipt, oldest first (:mod:`pipeline.lake.tombstones`)."""
        from pipeline.lake.tombstones import receipts

        with self._own(), lake_session(self.settings, read_only=True) as lake:
            return receipts(lake)

    def verify(self) -> ImageComparison:
        """Every table against its source: counts, distinct ids, checksum (:mod:`pipeline.load.verify`);
        equal only when each table is."""
        from pipeline.load.verify import compare

        with self._own():
            return compare(self.settings)

    def prove(self, since: timedelta | None) -> ImageCheck:
        """Every table against its source by id over ``since`` before the watermark (None: all), bucket
        by bucket (:func:`pipeline.load.proof.prove_in`), in one source snapshot: no row is read
        where the buckets agree. Tables of an image are proven over one range, up to the oldest
        watermark (as reconcile and repair compare them); exact only when each table is."""
        from pipeline.lake import batches
        from pipeline.load.proof import ImageCheck, prove_in
        from pipeline.source.shape import SourceRelation
        from pipeline.source.snapshot import exported_snapshot

        settings = self.settings
        with self._own(), lake_session(settings, read_only=True) as lake, \
                exported_snapshot(settings.source_dsn, arrivals=False) as snapshot:
            every = lake.tables(settings.tables)
            tables = batches.loaded(every)  # none loaded: prove_in says so
            relations = {table: SourceRelation.of(snapshot.conn, table)
                         for table in tables}
            return ImageCheck({table.name: prove_in(snapshot.conn, member, relations[table], since,
                                                    retention=settings.source_retention)
                               for table, member in tables.items()},
                              not_loaded=tuple(table.name for table in every if table not in tables))

    def repair(self, since: timedelta | None) -> RepairReport:
        """Replace the lake's rows of every id that differs from the source over ``since`` (None:
        all) by the source's, in one snapshot (:mod:`pipeline.load.repair`)."""
        from pipeline.load.repair import repair

        with self._own():
            return repair(self.settings, since)

    # --- the lake, from Python ------------------------------------------------------------
    def sql(self, query: str, params: list[object] | dict[str, object] | None = None, *,
            write: bool = False) -> pa.Table:
        """One SQL statement against the lake (its default catalog: ``FROM events``), as an Arrow
        table; read-only and judged as ``--sql`` is unless ``write``."""
        from pipeline.sql_session.query import arrow_query

        return arrow_query(self.settings, query, params, write=write)

    def at(self, *, version: int | None = None, time: str | datetime | None = None) -> LakeAt:
        """The lake as it was at snapshot ``version`` or at ``time`` (read-only): ``.sql(…)``."""
        if (version is None) == (time is None):
            raise ConfigError("at() takes one of version= or time=.", "E.g. lake.at(version=3).sql(…).")
        return LakeAt(self, version, time.isoformat() if isinstance(time, datetime) else time)

    def snapshots(self) -> pa.Table:
        """Every snapshot the lake keeps: id, time, schema version, changes, author, message."""
        return self.sql("SELECT * FROM snapshots() ORDER BY snapshot_id")

    def changes(self, start: int | str, end: int | str, *, table: str | None = None) -> pa.Table:
        """The change feed of ``table`` (default: the one table loaded; with several, name it) from
        snapshot (or time) ``start`` to ``end``, both included."""
        from pipeline.sqltext import quote_literal

        schema, _, name = (table or self.settings.one_table("table=")).rpartition(".")
        bounds = [str(b) if isinstance(b, int) else f"TIMESTAMPTZ {quote_literal(b)}" for b in (start, end)]
        return self.sql(f"SELECT * FROM ducklake_table_changes({quote_literal(self.settings.lake_name)}, "
                        f"{quote_literal(schema or 'main')}, {quote_literal(name)}, {bounds[0]}, "
                        f"{bounds[1]}) ORDER BY snapshot_id, rowid")

    def status(self) -> Status:
        """Watermark, lag, batches, jobs and health (:mod:`pipeline.ops.status`)."""
        from pipeline.ops.status import collect

        with self._own():
            return collect(self.settings)
