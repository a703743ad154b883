"""The default extractor: a partitioned PySpark JDBC read written as staging Parquet."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline import faults
from pipeline.extract.arrow_writer import write_tables
from pipeline.extract.batch import ExtractRequest, select_sql
from pipeline.extract.partitions import plan_partitions, time_chunks
from pipeline.extract.spark_s3a import missing_s3a
from pipeline.extract.spark_session import default_cores
from pipeline.source.snapshot import import_statements
from pipeline.source.window import Window, iso

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql import SparkSession

FETCH_SIZE = 20_000
DRIVER_CHUNK_ROWS = 250_000  # rows the driver holds at once with STAGING_WRITER=driver


def jdbc_options(request: ExtractRequest, window: Window, partitions: int) -> dict[str, str]:
    """Options for ``spark.read.format('jdbc')`` reading ``window`` (the request's, or one time
    chunk of it) in the planner's snapshot, split on ``event_timestamp`` into ``partitions``."""
    settings, stats = request.settings, request.stats
    dsn = settings.source_dsn
    snapshot = import_statements(request.snapshot_id) if request.snapshot_id else []
    query = select_sql(settings.source_table, window, request.extra_columns)
    options = {
        "url": dsn.jdbc_url(),
        "driver": "org.postgresql.Driver",
        "user": dsn.user,
        "password": dsn.password.reveal(),
        "dbtable": f"({faults.slow_read(settings, query)}) AS src",
        "fetchsize": str(FETCH_SIZE),
        # every partition reads the planner's snapshot, in UTC
        "sessionInitStatement": "; ".join([*snapshot, "SET TIME ZONE 'UTC'"]),
    }
    if partitions > 1 and stats.min_ts is not None and stats.max_ts is not None \
            and stats.min_ts < stats.max_ts:
        # bounds only shape the split; rows outside them still land in the first/last partition
        options.update(partitionColumn="event_timestamp", numPartitions=str(partitions),
                       lowerBound=iso(stats.min_ts).replace("+00:00", ""),
                       upperBound=iso(stats.max_ts).replace("+00:00", ""))
    return options


class SparkExtractor:
    """Reads the window over JDBC with Spark and writes one Parquet file per partition."""

    engine = "spark"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def write_parquet(self, request: ExtractRequest) -> None:
        if request.settings.staging_writer == "driver":
            self._write_through_driver(request)
            return
        # SPARK_PARTITIONS, else planned from the rows and the cluster's task slots (under Spark
        # Connect asking for those runs a small job, so it is only done when needed)
        partitions = request.settings.spark.partitions or plan_partitions(request.stats.rows,
                                                                          default_cores(self.spark))
        options = jdbc_options(request, request.window, partitions)
        frame = self.spark.read.format("jdbc").options(**options).load()
        # "error" (not its alias "errorifexists", which Spark Connect rejects): never overwrite a batch
        try:
            frame.write.mode("error").parquet(request.folder.spark_uri())
        except Exception as exc:
            error = missing_s3a(exc, request.settings)
            if error is None:
                raise
            raise error from None

    def _write_through_driver(self, request: ExtractRequest) -> None:
        """For clusters that share no folder with the driver (Spark Connect to a remote cluster,
        workers without the staging volume): the executors read, the driver receives each
        time chunk as Arrow and writes the staging files itself; memory holds one chunk."""
        stats = request.stats
        chunks = time_chunks(request.window, stats.rows, stats.min_ts, stats.max_ts, DRIVER_CHUNK_ROWS)

        def tables() -> Iterator[pa.Table]:
            for chunk in chunks:
                options = jdbc_options(request, chunk, partitions=1)
                yield self.spark.read.format("jdbc").options(**options).load().toArrow()

        write_tables(request.folder, tables(), request.extra_columns)
