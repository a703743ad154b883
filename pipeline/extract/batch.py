"""What every extraction engine shares: the source query, the request, and how a batch ends.

Engines (:mod:`.spark_engine`, :mod:`.dlt_engine`) only differ in how they move rows from
Postgres into Parquet files inside the batch folder; the query, the column types and the
manifest are the same, so both engines produce identical lakes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pipeline import staging
from pipeline.errors import (
    EngineUnavailable,
    PipelineError,
    SourceUnavailable,
    TerminalError,
    disk_full,
    first_line,
    is_disk_full,
    is_transient,
    scrub_secrets,
)
from pipeline.extract import lake_files
from pipeline.id_checksum import IdSum
from pipeline.progress import Progress
from pipeline.promote import zero_copy
from pipeline.promote.zero_copy import LakeTarget, PromotionChoice
from pipeline.settings import ResolvedSettings, TableSpec
from pipeline.settings.model import Engine, StagingWriter
from pipeline.source.plan import BatchPlan
from pipeline.source.shape import STAGED_COLUMNS, staged_extra
from pipeline.source.stats import WindowStats
from pipeline.source.window import Window, iso
from pipeline.staging import StagedBatch
from pipeline.storage.folder import Folder
from pipeline.storage.outage import store_outage

if TYPE_CHECKING:
    import pyarrow.parquet as pq


def select_sql(relation: str, window: Window, extra_columns: Mapping[str, str] | None = None,
               columns: Mapping[str, str] | None = None, also: str | None = None) -> str:
    """The one SELECT every reader runs (with literal bounds: JDBC subqueries take no params):
    the staged columns as text, or ``columns`` (the arrow reader's typed ones for a UUID/JSON
    zero-copy lake), with ``also`` (a slice's page range) ANDed to the window. Columns the
    source added (schema drift) travel as text (:func:`pipeline.source.shape.staged_extra`); the
    promoter casts them. ``relation``: the table
    as the stages read it (:attr:`pipeline.source.shape.SourceRelation.sql`)."""
    chosen = STAGED_COLUMNS if columns is None else columns
    columns_sql = ", ".join([f"{expr} AS {name}" for name, expr in chosen.items()]
                        + staged_extra(extra_columns or {}))
    where = window.literal_sql() if also is None else f"({window.literal_sql()}) AND {also}"
    return f"SELECT {columns_sql} FROM {relation} WHERE {where}"


@dataclass(frozen=True)
class ExtractRequest:
    """One extraction: the window, what the source said it holds, and where to write."""

    settings: ResolvedSettings
    table: TableSpec  # the table of the image this batch is of
    plan: BatchPlan  # the run's, made once: every engine reads its window in its snapshot and zone
    batch_id: str
    lake_id: str | None = None  # the lake the batch is for (recorded in its manifest)
    promotion: PromotionChoice = PromotionChoice()  # decided with the plan (pipeline.promote.zero_copy)
    # SOURCE_TABLES: the plan's batches across tables (table -> batch id), promoted together
    group: tuple[str, dict[str, str]] | None = None
    # a plan whose readers sum the ids (BatchPlan.ids_read), read by an engine that did not: the
    # planner's snapshot sums them instead (its proof, as for any window)
    source_ids: Callable[[], IdSum] | None = None

    @property
    def lake_target(self) -> LakeTarget | None:
        """Zero-copy: where the tasks write the lake's own files (None: staging only)."""
        return self.promotion.target

    @property
    def copy_reason(self) -> str | None:
        return self.promotion.reason

    # the plan's parts the engines read
    @property
    def window(self) -> Window:
        return self.plan.window

    @property
    def extra_columns(self) -> dict[str, str]:
        """Columns the source added (schema drift) -> their lake types."""
        return self.plan.extra_columns

    @property
    def stats(self) -> WindowStats:
        return self.plan.stats

    @property
    def snapshot_id(self) -> str | None:
        return self.plan.snapshot_id

    @property
    def timezone(self) -> str:
        return self.plan.timezone

    @property
    def folder(self) -> Folder:
        return staging.batch_dir(staging.table_dir(self.settings, self.table), self.batch_id)


class Extractor(Protocol):
    engine: Engine

    def write_parquet(self, request: ExtractRequest, meter: Progress) -> IdSum | None:
        """Write the window's rows as Parquet files into ``request.folder``, reporting rows
        written (or estimated) to ``meter``; return the ids read dated in the window's range when
        the plan asks the readers to sum them (:attr:`BatchPlan.ids_read`) and they did, else None."""


class ShortBatch(TerminalError):
    """The staged files hold fewer (or more) rows than the source held in the window."""


def extract(extractor: Extractor, request: ExtractRequest) -> StagedBatch:
    """Run ``extractor`` into a new batch folder, check the rows staged against the rows the
    planner counted in the same snapshot, then write the manifest (last). The caller claimed the
    batch before its first file (:func:`pipeline.staging.claim_batch`; a crash leaves a record the
    next run acts on); the claim is released here, however the extraction ends."""
    started = time.monotonic()
    folder = request.folder
    meter = Progress(f"extracting with {extractor.engine}", total=request.stats.rows)
    table_dir = staging.table_dir(request.settings, request.table)
    try:
        batch = _extract_claimed(extractor, request, folder, meter, started)
    except BaseException:
        # the store that failed the extraction may fail the release too: the first error is the news
        with contextlib.suppress(OSError):
            staging.release_batch(table_dir, request.batch_id)
        raise
    try:
        staging.release_batch(table_dir, request.batch_id)
    except OSError as exc:
        raise store_outage(request.settings, exc) or exc from None
    return batch


def _extract_claimed(extractor: Extractor, request: ExtractRequest, folder: Folder, meter: Progress,
                     started: float) -> StagedBatch:
    try:
        read = extractor.write_parquet(request, meter)
    except BaseException as exc:
        # partial files (Spark's _temporary parts, a half-written file on a full disk): never
        # promoted, so removed now rather than left for maintenance an hour later
        with contextlib.suppress(Exception):
            staging.remove_batch(folder)
            if request.lake_target:
                lake_files.incoming_dir(request.lake_target, request.batch_id).remove()
                request.lake_target.remove_ids()
        if isinstance(exc, PipelineError) or not isinstance(exc, Exception):
            raise
        if is_disk_full(exc):
            zero = request.lake_target is not None
            raise disk_full(exc, request.settings.data_path if zero else request.settings.staging_path,
                            "DUCKLAKE_DATA_PATH" if zero else "STAGING_PATH") from None
        store = store_outage(request.settings, exc)
        if store is not None:
            raise store from None
        text = str(exc)
        if _engine_gone(exc):  # the engine's own process, not the source: say which
            raise EngineUnavailable(
                f"The {extractor.engine} engine's driver process went away during the extraction "
                f"({first_line(scrub_secrets(text))}). Nothing was staged or promoted.",
                "The next run starts it again and reads the same window; if it keeps dying, see its log "
                "(<EVENT_LAKE_HOME>/logs/spark.log) for memory (SPARK_DRIVER_MEMORY).") from None
        if "invalid snapshot identifier" in text or "snapshot" in text and "does not exist" in text:
            raise SourceUnavailable(
                f"The source Postgres at {request.settings.source_dsn.masked()} lost the planner's snapshot "
                "during the extraction (it restarted, or the planner's connection dropped). Nothing was "
                "staged or promoted.", "The next run plans again under a new snapshot and reads the same "
                "window; nothing is lost.") from None
        if not is_transient(exc):
            raise
        dsn = request.settings.source_dsn
        raise SourceUnavailable(
            f"Extraction with {extractor.engine} lost the source Postgres at {dsn.masked()} mid-read "
            f"({first_line(scrub_secrets(str(exc)))}). Nothing was staged or promoted.",
            "Check that the source runs and is reachable from the engine; the next run reads the "
            "same window again, so nothing is lost.") from None
    target = request.lake_target
    settled = lake_files.settle(target, request.batch_id, folder) if target else lake_files.Settled()
    lake = settled.lake_files
    files = staging.parquet_files(folder)
    rows = (sum(_parquet_metadata(folder, name).num_rows for name in files)
            + sum(f["rows"] for f in lake) + settled.rows_seen)
    if rows != request.stats.rows:
        if target:
            zero_copy.remove_files(lake, zero_copy.table_folder(request.settings, request.table))
        staging.remove_batch(folder)
        raise short_batch_error(request, extractor.engine, rows, len(files) + len(lake))
    schema = _parquet_metadata(folder, files[0]).schema.to_arrow_schema() if files else settled.schema
    proven = _proof(request, read)
    batch = staging.seal(
        folder,
        batch_id=request.batch_id,
        table=request.table.name,
        engine=extractor.engine,
        window=request.window,
        row_count=rows,
        files=files,
        schema=[{"name": f.name, "type": str(f.type)} for f in schema] if schema else [],
        extract_seconds=round(time.monotonic() - started, 3),
        lake_id=request.lake_id,
        extra_columns=request.extra_columns or None,
        extra_defaults=request.plan.extra_defaults or None,
        source=request.settings.source_name(request.table),
        lake_files=lake or None,
        lake_snapshot=target.snapshot_id if target else None,
        rows_seen=settled.rows_seen,
        copy_reason=request.copy_reason,
        arrival_mark=iso(request.plan.arrival_mark) if request.plan.arrival_mark else None,
        snapshot_xmin=request.plan.snapshot_xmin,
        arrived_after=iso(request.window.arrivals.after) if request.window.arrivals else None,
        rows_behind_mark=request.plan.rows_behind,
        group=request.group[0] if request.group else None,
        group_batches=request.group[1] if request.group else None,
        id_column=request.table.id_column,
        time_column=request.table.time_column,
        absent=list(request.plan.source.absent) or None,
        backfill=request.plan.backfill,
        source_oid=request.plan.source.oid,
        source_columns=dict(request.plan.source.attnums) or None,
        source_types=dict(request.plan.source.types) or None,
        source_filenode=request.plan.source.filenode,
        ids_unique=request.plan.unique_ids,
        id_kind=request.plan.ids.kind.value,
        source_ids=proven.count if proven else None,
        source_id_checksum=proven.checksum if proven else None,
    )
    meter.finish(rows, "staged")
    return batch


def _proof(request: ExtractRequest, read: IdSum | None) -> IdSum | None:
    """The ids the source holds dated in the window's range, in the planner's snapshot: the plan's
    count, or what the readers read when they summed it (the row check above holds them to the
    plan's count), or the snapshot's sums when this engine did not."""
    if not request.plan.ids_read:
        return request.plan.source_ids
    if read is None and request.source_ids is not None:
        return request.source_ids()
    return read


def _engine_gone(exc: BaseException) -> bool:
    """Did the engine's own process go away (py4j lost its gateway to the driver JVM), rather than a
    service the engine talks to?"""
    chain: BaseException | None = exc
    while chain is not None:
        if type(chain).__module__.startswith("py4j") and "Network" in type(chain).__name__:
            return True
        chain = chain.__cause__ or chain.__context__
    return False


def _parquet_metadata(folder: Folder, name: str) -> pq.FileMetaData:
    import pyarrow.parquet as pq  # here: the CLI's commands that read no file do without pyarrow

    with folder.open_input(name) as handle:
        return pq.read_metadata(handle)


def short_batch_error(request: ExtractRequest, engine: str, rows: int, files: int) -> ShortBatch:
    """Say what is missing, where it was expected, and the likely cause."""
    settings = request.settings
    local = settings.spark.remote is None and settings.spark.master.startswith("local")
    local = local or settings.staging_writer is StagingWriter.DRIVER or not request.folder.is_local
    cause = ("" if local or engine != Engine.SPARK else
             f" The likely cause: the Spark executors ({settings.spark.shown}) "
             "do not share this folder with the driver, so they wrote their files elsewhere.")
    if request.lake_target is not None and cause:
        cause += (f" (Zero-copy promotion has them write the lake's files under DUCKLAKE_DATA_PATH="
                  f"{settings.data_path} too.)")
    return ShortBatch(
        f"Extraction with {engine} staged {rows} rows in {files} file(s) in {request.folder.uri()}, but the "
        f"source holds {request.stats.rows} rows in window {request.window.describe()} (counted in the "
        f"same snapshot the engine read). Nothing was promoted and the batch was removed.{cause}",
        "Mount STAGING_PATH (and, for zero-copy promotion, DUCKLAKE_DATA_PATH) at the same absolute "
        "path on the driver and every Spark worker (NFS, EFS, a Kubernetes RWX volume), or set "
        "STAGING_WRITER=driver so the driver writes the staging files itself (promotion then copies); "
        "then run again. Nothing is lost meanwhile.")
