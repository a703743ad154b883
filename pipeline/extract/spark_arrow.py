"""``SPARK_READER=arrow`` (the default): Spark schedules the window's time slices, each task reads
and writes its own slice (:mod:`.slice_task`), and only ``(slice, rows)`` comes back.

The planner's window is cut into slices of about equal rows (as many as the cluster has task
slots once the window is big enough); a DataFrame of slice numbers, one partition each, goes
through ``mapInArrow``. So Spark decides where and how many slices run at once — local cores, a
standalone cluster, a Connect server's executors — while Postgres and pyarrow move the rows:
no JDBC jar, no row conversion in the JVM, and the lake's own Parquet types (UUID, JSON).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from pipeline.errors import ConfigError, first_line, scrub_secrets
from pipeline.extract import partitions, read_ids
from pipeline.extract.batch import ExtractRequest, select_sql
from pipeline.extract.lake_files import incoming_dir
from pipeline.extract.partitions import plan_partitions, time_chunks
from pipeline.extract.slice_task import (
    FACTS_SCHEMA,
    PROBE_SCHEMA,
    RESULT_SCHEMA,
    LakeOutput,
    SliceJob,
    SliceSource,
    SourceProbe,
    executor_facts,
)
from pipeline.extract.spark_progress import task_progress
from pipeline.extract.spark_session import connect_lost, default_cores, functions
from pipeline.extract.task_reports import ReportTo
from pipeline.id_checksum import IdSum
from pipeline.progress import Progress
from pipeline.source.give_way import reader_tag
from pipeline.source.shape import TYPED_COLUMNS
from pipeline.source.window import Window

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.promote.zero_copy import LakeTarget
    from pipeline.settings.pgdsn import PgDsn
    from pipeline.storage.folder import Folder


Slice = tuple[Window, str | None]  # the window (or a time part of it), and a page range or None


def slices(request: ExtractRequest, count: int, rows_per_slice: int | None = None) -> list[Slice]:
    """The window cut into ``count`` slices: page ranges of the table when the window holds much
    of it (a first load, a reconcile), else time slices of about equal rows (or of
    ``rows_per_slice``)."""
    stats = request.stats
    if rows_per_slice is None:
        # a first part of a history has no lower bound either, but is a part: by its share
        pages = partitions.page_ranges(stats.rows, stats.table_rows, stats.table_pages, count,
                                       whole=request.window.low is None and not request.plan.backfill)
        if pages:
            return [(request.window, partitions.page_predicate(p)) for p in pages]
    per = rows_per_slice or max(1, math.ceil(stats.rows / max(count, 1)))
    return [(w, None) for w in time_chunks(request.window, stats.rows, stats.min_ts, stats.max_ts, per)]


def job(request: ExtractRequest, parts: list[Slice], output: Folder | LakeOutput | None,
        report_to: ReportTo | None = None) -> SliceJob:
    """The pickled part every task gets: how to reach the source, one query per slice, where to
    write (and where to report its rows as it reads, for a progress line)."""
    typed = isinstance(output, LakeOutput) and output.typed
    columns = TYPED_COLUMNS if typed else None
    queries = tuple(select_sql(request.plan.source.sql, window, request.extra_columns, columns=columns,
                               also=pages) for window, pages in parts)
    return SliceJob(slice_source(request), queries, output, tuple(request.extra_columns), report_to,
                    sum_ids_to=request.window.upper if request.plan.ids_read else None)


def slice_source(request: ExtractRequest) -> SliceSource:
    """How this extraction's tasks reach the source, tagged with its snapshot and batch
    (application_name: :func:`pipeline.source.give_way.reader_tag`)."""
    return SliceSource(request.settings.source_dsn.conninfo(), request.snapshot_id, request.timezone,
                       tag=reader_tag(request.snapshot_id or "", request.batch_id))


def lake_output(target: LakeTarget, batch_id: str) -> LakeOutput:
    return LakeOutput(incoming_dir(target, batch_id), target.incoming if target.lake_ids else None,
                      target.lake_ids, target.typed, target.payload_keys)


def write_slices(spark: SparkSession, request: ExtractRequest, meter: Progress) -> IdSum | None:
    """Read and write the window in slices on the executors; returns the ids they read dated in
    its range when the plan asked them to sum them (:attr:`BatchPlan.ids_read`), else None."""
    count = request.settings.spark.partitions or plan_partitions(request.stats.rows, default_cores(spark))
    parts = slices(request, count)
    if request.lake_target is not None:
        output: Folder | LakeOutput = lake_output(request.lake_target, request.batch_id)
    else:
        request.folder.make(exist_ok=False)  # never write into an existing batch
        output = request.folder
    tasks = spark.range(0, len(parts), 1, len(parts))  # slice numbers, one partition (task) each
    with task_progress(spark, meter) as report_to:
        frame = tasks.mapInArrow(job(request, parts, output, report_to), RESULT_SCHEMA)
        results = frame.collect()
    if not request.plan.ids_read:
        return None
    return read_ids.of_results([(row["ids"], row["id_high"], row["id_low"]) for row in results])


def fetch_through_driver(spark: SparkSession, request: ExtractRequest) -> Iterator[pa.Table]:
    """``STAGING_WRITER=driver``: the executors read, the driver receives one time chunk at a
    time as Arrow (memory holds one chunk) and writes the staging files itself."""
    from pipeline.extract.arrow_writer import staging_schema

    schema = _spark_ddl(staging_schema(request.extra_columns))
    for part in slices(request, 0, partitions.DRIVER_CHUNK_ROWS):
        frame = spark.range(0, 1, 1, 1).mapInArrow(job(request, [part], None), schema)
        yield frame.select(*[functions(spark).col(name) for name in frame.columns]).toArrow()


def _spark_ddl(schema: pa.Schema) -> str:
    """The staging schema in Spark's DDL (text and UTC timestamps only)."""
    kinds = {pa.string(): "string", pa.timestamp("us", tz="UTC"): "timestamp"}
    return ", ".join(f"`{f.name}` {kinds[f.type]}" for f in schema)


def executors(spark: SparkSession) -> list[dict[str, object]]:
    """One task per task slot reports its executor's host, Python and what it cannot import.
    A worker whose Python cannot even start the task (no pyarrow, or no ``pipeline`` to unpickle
    it from) fails the job: that becomes one report naming the error."""
    slots = default_cores(spark)
    try:
        rows = spark.range(0, slots, 1, slots).mapInArrow(executor_facts, FACTS_SCHEMA).collect()
    except Exception as exc:
        if connect_lost(exc) or "python worker" not in str(exc).lower():
            raise  # Spark itself failed (a lost Connect server): not a finding about the workers
        # a worker that could not start the task (no pyarrow, no pipeline to unpickle it from)
        try:
            python = str(spark.sparkContext.pythonExec)
        except Exception:  # noqa: BLE001  a Connect session has no context here: the server's workers decide
            python = "of the Connect server's workers (PYSPARK_PYTHON)"
        return [{"host": "an executor", "pid": 0, "python": python,
                 "problems": first_line(scrub_secrets(str(exc)))}]
    return [row.asDict() for row in rows]


def source_from_executor(spark: SparkSession, source_dsn: PgDsn) -> str:
    """Read ``SELECT 1`` from the source on an executor, as a slice would; returns its host."""
    source = SliceSource(source_dsn.conninfo(), None, "UTC")
    row = spark.range(0, 1, 1, 1).mapInArrow(SourceProbe(source), PROBE_SCHEMA).first()
    assert row is not None, "one row in, one row out"
    return str(row["host"])


def executor_problem(facts: list[dict[str, object]]) -> str | None:
    """What the first executor that cannot run the reader says (None: every one can)."""
    broken = [f for f in facts if f["problems"]]
    if not broken:
        return None
    first = broken[0]
    return (f"a Spark executor on {first['host']} (Python {first['python']}) cannot run the arrow reader: "
            f"{first['problems']}")


def require_executors(spark: SparkSession) -> None:
    """Raise a plain error when an executor lacks the reader's packages."""
    problem = executor_problem(executors(spark))
    if problem:
        raise ConfigError(f"{problem[0].upper()}{problem[1:]}.", EXECUTOR_FIX)


EXECUTOR_FIX = ("Every executor needs this project's Python environment (pyarrow, adbc-driver-postgresql and "
                "the pipeline package): point spark.pyspark.python (SPARK_CONF) or PYSPARK_PYTHON on the "
                "Connect server at that environment's python, or set SPARK_READER=jdbc.")
