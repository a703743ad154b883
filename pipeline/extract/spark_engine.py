"""The Spark extractor. Two readers: ``arrow`` (the default, :mod:`.spark_arrow`: Spark schedules
time slices, each task reads its slice with ADBC and writes Parquet itself) and ``jdbc`` (here:
Spark's JDBC reader and Parquet writer; needs the Postgres JDBC jar)."""

from __future__ import annotations

import logging
import secrets
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pipeline import staging
from pipeline.errors import PipelineError
from pipeline.extract import partitions
from pipeline.extract.arrow_writer import write_tables
from pipeline.extract.batch import STAGED_COLUMNS, ExtractRequest, select_sql
from pipeline.extract.executor_watch import ExtractionWatch
from pipeline.extract.lake_files import incoming_dir
from pipeline.extract.partitions import plan_partitions, time_chunks
from pipeline.extract.slice_task import DEST, SEEN
from pipeline.extract.spark_progress import task_progress
from pipeline.extract.spark_s3a import missing_s3a
from pipeline.extract.spark_session import (
    cancel_jobs,
    connect_lost,
    connect_lost_error,
    default_cores,
    functions,
)
from pipeline.id_checksum import IdSum
from pipeline.lake.schema import PARTITION_KEYS
from pipeline.lake.validate import Helpers
from pipeline.process import cancellable
from pipeline.progress import Progress
from pipeline.promote import zero_copy
from pipeline.promote.zero_copy import LakeTarget
from pipeline.settings import ResolvedSettings
from pipeline.settings.model import Engine, Promotion, Reader, SparkOptions, StagingWriter
from pipeline.source.connect import connect
from pipeline.source.shape import SourceRelation
from pipeline.source.snapshot import import_statements
from pipeline.source.window import Window
from pipeline.sqltext import quote_literal

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql import DataFrame, DataFrameWriter, SparkSession

log = logging.getLogger(__name__)
FETCH_SIZE = 20_000
WARM_UP_ROWS = 200_000  # enough row conversions for the JIT to compile the read and write loops


def connection_options(settings: ResolvedSettings) -> dict[str, str]:
    dsn = settings.source_dsn
    return {"url": dsn.jdbc_url(), "driver": "org.postgresql.Driver", "user": dsn.user,
            "password": dsn.password.reveal(), "fetchsize": str(FETCH_SIZE)}


def split_column(request: ExtractRequest) -> str:
    """The name of the JDBC read's split column: one no column of the table has."""
    return Helpers.beside(request.extra_columns).split_time


def jdbc_options(request: ExtractRequest, window: Window, partitions: int) -> dict[str, str]:
    """Options for ``spark.read.format('jdbc')`` reading ``window`` (the request's, or one time
    chunk of it) in the planner's snapshot, split on the table's time column into ``partitions``:
    as the source holds it, beside the staged one (NULL for ±infinity: an expression Postgres
    cannot match to its index), so each partition's range reaches the index; in a column of its
    own (:func:`split_column`), which the caller drops before writing."""
    settings, stats = request.settings, request.stats
    snapshot = import_statements(request.snapshot_id) if request.snapshot_id else []
    split = partitions > 1 and stats.min_ts is not None and stats.max_ts is not None \
        and stats.min_ts < stats.max_ts
    split_on = split_column(request)
    columns = {**STAGED_COLUMNS, split_on: "event_timestamp"} if split else None
    query = select_sql(request.plan.source.sql, window, request.extra_columns, columns=columns)
    options = {
        **connection_options(settings),
        "dbtable": f"({query}) AS src",
        # every partition reads the planner's snapshot, in the planner's time zone (PgJDBC would
        # set the JVM's, UTC, and naive columns would be read as UTC)
        "sessionInitStatement": "; ".join([*snapshot, f"SET TIME ZONE {quote_literal(request.timezone)}"]),
    }
    if split:
        assert stats.min_ts is not None and stats.max_ts is not None
        # bounds only shape the split; rows outside them still land in the first/last partition.
        # Spark writes them back as text, which Postgres reads in the session's zone: wall clock there
        options.update(partitionColumn=split_on, numPartitions=str(partitions),
                       lowerBound=wall_clock(stats.min_ts, request.timezone),
                       upperBound=wall_clock(stats.max_ts, request.timezone))
    return options


def wall_clock(instant: datetime, zone: str) -> str:
    """``instant`` as the naive wall-clock text of ``zone`` (what a JDBC partition bound is); in UTC
    for a zone only Postgres knows (a POSIX rule such as ``EST5EDT,M3.2.0,M11.1.0``): a bound only
    shapes the split, and hours off it still splits."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        local = instant.astimezone(ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):
        local = instant.astimezone(UTC)
    return local.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


class SparkExtractor:
    """Reads the window over JDBC with Spark and writes one Parquet file per partition."""

    engine = Engine.SPARK

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def write_parquet(self, request: ExtractRequest, meter: Progress) -> IdSum | None:
        """Write the window's rows; a Spark Connect server lost on the way is said as such (the
        caller removes what was written, whatever the error). The arrow reader's slices sum the
        ids they read when the plan asks (:attr:`BatchPlan.ids_read`)."""
        try:
            with self._watched(request.settings.spark):
                return self._write(request, meter)
        except BaseException as exc:
            if request.settings.spark.reader is Reader.ARROW:
                from pipeline.extract.spark_arrow import slice_source

                # the cancelled tasks' queries would run on in Postgres (one more per retry)
                if cancelled := slice_source(request).cancel_reads():
                    log.info("cancelled %d source read(s) the extraction left running", cancelled)
            if not isinstance(exc, Exception):
                raise
            remote = request.settings.spark.remote
            if remote and not isinstance(exc, PipelineError) and connect_lost(exc):
                raise connect_lost_error(remote, exc, "mid-extraction") from None
            raise

    @contextmanager
    def _watched(self, options: SparkOptions) -> Iterator[None]:
        """Every Spark job of this extractor runs in here: a stop request of a one-shot command
        cancels it; so do a cluster without executors and a job past LOAD_TIMEOUT, which then fail
        as temporary (:class:`~pipeline.extract.executor_watch.ExtractionWatch`)."""
        watch = ExtractionWatch(self.spark, options)
        with cancellable(lambda: cancel_jobs(self.spark)), watch:
            yield

    def _write(self, request: ExtractRequest, meter: Progress) -> IdSum | None:
        if request.settings.spark.reader is Reader.ARROW:
            return self._write_arrow(request, meter)
        if request.settings.staging_writer is StagingWriter.DRIVER:
            self._write_through_driver(request, meter)
            return None
        # SPARK_PARTITIONS, else planned from the rows and the cluster's task slots (under Spark
        # Connect asking for those runs a small job, so it is only done when needed)
        partitions = request.settings.spark.partitions or plan_partitions(request.stats.rows,
                                                                          default_cores(self.spark))
        options = jdbc_options(request, request.window, partitions)
        frame = self.spark.read.format("jdbc").options(**options).load()
        if (split := split_column(request)) in frame.columns:
            frame = frame.drop(split)
        if request.lake_target is not None:
            writer = self._lake_writer(frame, request.lake_target)
            target = incoming_dir(request.lake_target, request.batch_id).spark_uri()
        else:
            writer, target = frame.write, request.folder.spark_uri()
        # "error" (not its alias "errorifexists", which Spark Connect rejects): never overwrite a batch
        try:
            with task_progress(self.spark, meter):
                writer.mode("error").parquet(target)
        except Exception as exc:
            error = missing_s3a(exc, request.settings.staging_path)
            if error is None:
                raise
            raise error from None
        return None

    def _write_arrow(self, request: ExtractRequest, meter: Progress) -> IdSum | None:
        from pipeline.extract import spark_arrow

        if request.settings.staging_writer is StagingWriter.DRIVER:
            write_tables(request.folder, spark_arrow.fetch_through_driver(self.spark, request),
                         request.extra_columns, on_rows=meter.update)
            return None
        return spark_arrow.write_slices(self.spark, request, meter)

    def warm_up(self, settings: ResolvedSettings, rows: int = WARM_UP_ROWS) -> None:
        """Start what the first load would otherwise start: with the arrow reader, a Python
        worker per task slot that imports the reader (and a plain error if an executor cannot);
        with the JDBC reader, see :meth:`_warm_up_jdbc`. Watched as an extraction is: a cluster
        with no executor when a run starts left it waiting, silent, for ever."""
        try:
            with self._watched(settings.spark):
                if settings.spark.reader is Reader.ARROW:
                    from pipeline.extract import spark_arrow

                    spark_arrow.require_executors(self.spark)
                    return
                self._warm_up_jdbc(settings, rows)
        except Exception as exc:
            if settings.spark.remote and connect_lost(exc):
                raise connect_lost_error(settings.spark.remote, exc,
                                         "while starting the extraction (warming up its workers)") from None
            raise

    def _warm_up_jdbc(self, settings: ResolvedSettings, rows: int) -> None:
        """Run the extraction's read and write paths once over up to ``rows`` source rows, into a
        scratch folder that is removed after, so the JVM compiles them before the first real load
        (a long-lived scheduler pays the JIT once, at start). Any table of the image compiles the same
        paths: the one listed first is read."""
        table = settings.tables[0]
        with connect(settings.source_dsn) as conn:
            source = SourceRelation.of(conn, table)
        query = f"{select_sql(source.sql, Window(None, datetime.now(UTC)))} LIMIT {rows}"
        frame = self.spark.read.format("jdbc").options(
            **connection_options(settings), dbtable=f"({query}) AS src",
            sessionInitStatement="SET TIME ZONE 'UTC'").load()
        if settings.staging_writer is StagingWriter.DRIVER:
            frame.toArrow()
            return
        # where the real writes go: the lake's table folder (zero-copy) or the staging folder
        zero = settings.promotion is Promotion.ZERO_COPY
        folder = (zero_copy.table_folder(settings, table).child(zero_copy.INCOMING) if zero
                  else staging.table_dir(settings, table))
        scratch = folder.child(f"_warmup-{secrets.token_hex(4)}")
        try:
            writer = self._lake_writer(frame, LakeTarget(scratch, None, 0, 0)) if zero else frame.write
            writer.mode("error").parquet(scratch.spark_uri())
        finally:
            scratch.remove()

    def _lake_writer(self, frame: DataFrame, target: LakeTarget) -> DataFrameWriter:
        """Zero-copy's one write: split by destination, lake rows in their UTC day folders."""
        return self._split_for_lake(frame, target).write.partitionBy(DEST, *PARTITION_KEYS)

    def _split_for_lake(self, frame: DataFrame, target: LakeTarget) -> DataFrame:
        """Zero-copy: mark each row for the lake's files or for copy promotion (a NULL id or time,
        or an id the lake already holds in the window), and add its UTC day folder. The lake's
        ids join by broadcast, so each JDBC partition's time range stays one task: about one
        file per day, not one per shuffle partition."""
        F = functions(self.spark)
        in_lake = F.lit(False)
        if target.lake_ids is not None:
            seen = self.spark.read.parquet(target.incoming.child(target.lake_ids).spark_uri()).select(
                "event_id", F.lit(True).alias("_in_lake"))
            frame = frame.join(F.broadcast(seen), "event_id", "left")
            in_lake = F.col("_in_lake").isNotNull()
        complete = F.col("event_id").isNotNull() & F.col("event_timestamp").isNotNull()
        dest = F.when(in_lake, SEEN).when(complete, "lake").otherwise("stage")
        # rows the lake holds are only counted (the lake keeps its copy, as copy promotion does)
        kept = [F.when(~in_lake, F.col(name)).alias(name) if name in ("event_type", "details") else name
                for name in STAGED_COLUMNS]
        ts = F.col("event_timestamp")  # the session time zone is UTC (spark_session.SESSION_CONF)
        return frame.select(*kept, dest.alias(DEST), F.year(ts).alias("year"), F.month(ts).alias("month"),
                            F.dayofmonth(ts).alias("day"))

    def _write_through_driver(self, request: ExtractRequest, meter: Progress) -> None:
        """For clusters that share no folder with the driver (Spark Connect to a remote cluster,
        workers without the staging volume): the executors read, the driver receives each
        time chunk as Arrow and writes the staging files itself; memory holds one chunk."""
        stats = request.stats
        chunks = time_chunks(request.window, stats.rows, stats.min_ts, stats.max_ts,
                             partitions.DRIVER_CHUNK_ROWS)

        def tables() -> Iterator[pa.Table]:
            for chunk in chunks:
                options = jdbc_options(request, chunk, partitions=1)
                yield self.spark.read.format("jdbc").options(**options).load().toArrow()

        write_tables(request.folder, tables(), request.extra_columns, on_rows=meter.update)
