"""Zero-copy promotion, the lake's side: when a batch may skip the copy, and how its files join.

In zero-copy mode (``PROMOTION=zero-copy``) Spark writes the rows the lake does not hold yet as
the lake's own Parquet files, in the table's day folders; promotion then registers those files
(``ducklake_add_data_files``) in the same transaction as the state row and commit message: one
snapshot, work in proportion to the files, not the rows. Rows whose id the lake already holds
in the window's time range are only counted (the lake keeps its copy, as copy promotion does);
rows Spark cannot vouch for (a NULL id or time) are staged beside the files and promoted by
copy, through the one validation in :mod:`.validate`, in that same transaction.

What DuckLake requires, pinned in tests/integration/test_ducklake_assumptions.py:
- a file's column types must equal the table's exactly: the arrow reader writes Parquet's UUID
  and JSON types for a lake that holds ``event_id UUID`` and ``details JSON`` (every lake made
  since), and text for a lake made by the JDBC reader, whose writer has neither type (it holds
  both as text: the canonical UUID text and the source's JSON text);
- in the day-partitioned table, a file's partition values come from its hive path, and it must
  lie in the same ``year=/month=/day=`` folder DuckLake itself writes to, or compaction fails
  ("Files have different hive partition path");
- registration joins an open transaction like any insert.

Anything that breaks a premise makes that batch (or run) promote by copy, logged with the reason:
the copy path is always correct, zero-copy is the fast path when it provably is too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

import psycopg

from pipeline.columns import ID, OPTIONAL, TIME
from pipeline.lake import known_since, tombstones
from pipeline.lake.payload_fields import typed_keys
from pipeline.lake.schema import events_column_types
from pipeline.lake.session import LakeTable
from pipeline.lake.session import table_folder as lake_table_folder
from pipeline.settings import ResolvedSettings, Settings, TableSpec
from pipeline.settings.model import Engine, Promotion, Reader, StagingWriter
from pipeline.source.plan import BatchPlan
from pipeline.sqltext import one_row, quote_literal
from pipeline.staging import LakeFile
from pipeline.storage.folder import Folder, folder_of, is_object_store

log = logging.getLogger(__name__)

TimeSpan = tuple[datetime | None, datetime]  # [low, upper] on event_timestamp; low None: unbounded
TEXT_COLUMNS = ("event_id", "details")  # typed UUID / JSON in a copy lake, VARCHAR in a zero-copy lake
SOURCE_TYPES = {"event_id": ("uuid",), "details": ("jsonb", "json")}  # valid by the source's own types
INCOMING = "_incoming"  # <table folder>/_incoming/<batch id>/: Spark's output before it is settled
LAKE_IDS_SUFFIX = "-lake-ids.parquet"
# Above this share of the window already in the lake, a run promotes by copy: re-reading 1M
# loaded rows (a rerun) took 10.9 s with zero-copy against 6.5 s with copy (bench_pipeline).
MAX_OVERLAP = 0.5
# ...unless there are this few: a slice task checks 50k ids in well under 0.1 s, and with arrival-aware
# windows the ids in the batch's time range are mostly other events of the same seconds, not repeats
FEW_IDS = 50_000


def worth_zero_copy(lake_ids: int, rows: int) -> bool:
    """Is checking ``lake_ids`` ids in the slice tasks cheaper than copying ``rows`` rows?"""
    return lake_ids <= max(rows * MAX_OVERLAP, FEW_IDS)


@dataclass(frozen=True)
class LakeTarget:
    """Where Spark writes a zero-copy batch's lake files, and what the lake held when it began."""

    table_folder: Folder  # the events table's folder in the data path (DuckLake's own layout)
    lake_ids: str | None  # name (in :attr:`incoming`) of the Parquet file of the ids the lake holds
    lake_id_count: int  # in the window's range, and how many (0: no file)
    snapshot_id: int  # the lake snapshot those ids were read at
    typed: bool = False  # the lake holds event_id as UUID and details as JSON (else both as text)
    payload_keys: tuple[str, ...] = ()  # the table's typed payload keys: each file holds their columns

    @property
    def incoming(self) -> Folder:
        """Where Spark writes before settling, beside the lake's ids file."""
        return self.table_folder.child(INCOMING)

    def remove_ids(self) -> None:
        if self.lake_ids is not None:
            self.incoming.delete(self.lake_ids)


@dataclass(frozen=True)
class PromotionChoice:
    """How one batch is promoted, decided once with its plan (:func:`choose`) and carried by the
    extraction request and the manifest: zero-copy into ``target``, or by copy for ``reason``."""

    target: LakeTarget | None = None
    reason: str | None = None  # why by copy (None: zero-copy, or nothing decided yet)


def choose(settings: ResolvedSettings, table: LakeTable, source: psycopg.Connection,
           engine: str, plan: BatchPlan, batch_id: str) -> PromotionChoice:
    """How this batch is promoted, decided once, with its plan and before its first file:
    zero-copy, with where Spark writes the lake's files (the lake's ids in the window written for
    the tasks), or by copy, with the reason (logged, and kept in the snapshot's commit info)."""
    if settings.promotion is not Promotion.ZERO_COPY:
        return PromotionChoice(reason=f"PROMOTION={settings.promotion}")
    lake_types = events_column_types(table)
    keys = tuple(key.key for key in typed_keys(table))
    reason = blocker(settings, engine, lake_types, plan.source.types, plan.unique_ids, plan.extra_columns,
                     named_by=(plan.source.id_column, plan.source.time_column), payload_keys=keys)
    rows = plan.stats.rows
    if reason is None:
        span = ((plan.stats.min_ts, plan.stats.max_ts) if plan.stats.max_ts is not None
                else (plan.window.low, plan.window.upper))
        target = replace(write_lake_ids(table, span, batch_id, typed=lake_types.get("event_id") == "UUID"),
                         payload_keys=keys)
        if worth_zero_copy(target.lake_id_count, rows):
            return PromotionChoice(target)
        target.remove_ids()
        reason = (f"{target.lake_id_count} of the window's {rows} rows are in the lake already; "
                  "re-reading that many costs Spark more than copy promotion")
    log.info("zero-copy promotion not used (%s); this batch is promoted by copy", reason)
    return PromotionChoice(reason=reason)



def blocker(settings: Settings, engine: str, lake_types: Mapping[str, str], source_types: Mapping[str, str],
            unique_ids: bool, extra_columns: Mapping[str, str], *, named_by: tuple[str, str] = (ID, TIME),
            payload_keys: tuple[str, ...] = ()) -> str | None:
    """Why this run cannot write the lake's files directly (None: it can). Pure: the caller
    gathers the facts (``named_by``: the table's id and time columns)."""
    if engine != Engine.SPARK:
        return f"the {engine} engine stages rows for copy promotion"
    if settings.staging_writer is StagingWriter.DRIVER:
        return "STAGING_WRITER=driver: the executors cannot reach the lake's data path"
    jdbc = settings.spark.reader is Reader.JDBC
    if jdbc and is_object_store(settings.data_path):
        return (f"DUCKLAKE_DATA_PATH={settings.data_path} is object storage, which Spark's own writer "
                "reaches only through hadoop-aws (the arrow reader, SPARK_READER=arrow, writes it with "
                "pyarrow)")
    own = [name for name in named_by if name not in (ID, TIME)]
    lacking = [name for name in OPTIONAL if name not in source_types]
    if own or lacking:
        # Spark's files hold the events shape, which DuckLake registers only into a table of that shape
        return (f"the table {'names its own ' + ', '.join(own) if own else 'lacks ' + ', '.join(lacking)}: "
                "copy promotion writes its rows under the table's own columns")
    typed = [f"{name} {lake_types.get(name)}" for name in TEXT_COLUMNS if lake_types.get(name) != "VARCHAR"]
    if jdbc and typed:
        return (f"this lake holds {', '.join(typed)}, types Spark's own Parquet writer cannot write "
                "(the arrow reader, SPARK_READER=arrow, writes them)")
    if jdbc and payload_keys:
        return (f"this lake types payload keys ({', '.join(payload_keys)}), whose columns Spark's own writer "
                "does not compute (the arrow reader, SPARK_READER=arrow, does)")
    loose = [f"{name} is {source_types.get(name)}" for name, allowed in SOURCE_TYPES.items()
             if source_types.get(name) not in allowed]
    if loose:
        return f"the source's {', '.join(loose)}: each row is validated by copy promotion"
    if not unique_ids:
        return "the source has no unique index on event_id, so a batch may repeat an id"
    if extra_columns:
        return f"the source added columns ({', '.join(extra_columns)}), which copy promotion casts and adds"
    return None


def write_lake_ids(table: LakeTable, span: TimeSpan,
                   batch_id: str, *, typed: bool) -> LakeTarget:
    """Write the ids the lake holds in ``span`` (the time range of the rows the batch reads: an
    event keeps its time, so only there can the lake hold one of them) to a Parquet file beside
    the batch's incoming folder, for Spark to read (twice as fast as handing Spark an Arrow table
    from Python: 2.3 s against 6.0 s for 1M ids, warm); return the target with the lake
    snapshot read just before (a later commit only adds ids, never hides one)."""
    snapshot = one_row(table.lake.execute(f"SELECT max(snapshot_id) FROM {table.lake.name}.snapshots()"))[0]
    target = LakeTarget(table.table_folder, f"{batch_id}{LAKE_IDS_SUFFIX}", 0, int(snapshot), typed)
    target.incoming.make(exist_ok=True)
    low, upper = span
    where = "event_timestamp <= $upper" + (" AND event_timestamp >= $low" if low else "")
    params = {"upper": upper, **({"low": low} if low else {})}
    count = one_row(table.lake.execute(
        f"COPY (SELECT event_id FROM {table.rows} WHERE {where}) TO "
        f"{quote_literal(target.incoming.uri(target.lake_ids))} (FORMAT parquet)", params))[0]
    if count == 0:
        target.remove_ids()
        return replace(target, lake_ids=None)
    return replace(target, lake_id_count=int(count))


def inserted_since(table: LakeTable, snapshot_id: int) -> bool:
    """Did a snapshot after ``snapshot_id`` insert into the events table? (Then a batch whose ids
    were checked at ``snapshot_id`` may hold rows the lake took meanwhile.)"""
    metadata = table.lake.metadata()
    table_id = one_row(table.lake.execute(
        f"SELECT t.table_id FROM {metadata}.ducklake_table t JOIN {metadata}.ducklake_schema s "
        "USING (schema_id) WHERE s.schema_name = 'main' AND t.table_name = ? AND t.end_snapshot IS NULL "
        "AND s.end_snapshot IS NULL", [table.name]))[0]
    changed = one_row(table.lake.execute(
        f"SELECT count(*) FROM {table.lake.name}.snapshots() WHERE snapshot_id > ? AND "
        "(list_contains(changes['tables_inserted_into'], ?) OR list_contains(changes['inlined_insert'], ?))",
        [snapshot_id, str(table_id), str(table_id)]))[0]
    return changed > 0


def held_elsewhere(table: LakeTable, paths: list[str]) -> bool:
    """Does the lake hold any id of Spark's files ``paths``? Spark left out the ids the lake holds in
    the batch's time range; one found now is dated elsewhere in the lake (the source moved the row
    after it was loaded), and registering the file would hold it twice. An id erased from the table
    (:mod:`pipeline.lake.tombstones`) counts as held: it must not be registered either."""
    erased = tombstones.erased_relation(table)
    held = f"SELECT TRY_CAST(event_id AS UUID) AS event_id FROM {table.rows}"
    if erased is not None:
        held += f" UNION ALL SELECT identity FROM {erased}"
    return bool(one_row(table.lake.execute(
        "SELECT count(*) FROM (SELECT TRY_CAST(event_id AS UUID) AS event_id FROM "
        f"read_parquet($files, hive_partitioning = false)) f SEMI JOIN ({held}) lake "
        "ON lake.event_id = f.event_id", {"files": paths}))[0])


def columns_lacking(table: LakeTable, path: str) -> list[str]:
    """The table's columns Spark's file ``path`` lacks (registered, the file's rows would read NULL
    in them): a payload key typed after the batch's files were written, where the JSON holds it, a
    column the table gained since. Not the rows' first snapshot (:mod:`pipeline.lake.known_since`):
    NULL there is what every row loaded holds — its own snapshot is its first."""
    have = {str(name).lower()
            for (name,) in table.lake.execute("SELECT name FROM parquet_schema(?)", [path]).fetchall()}
    return [name for name in events_column_types(table)
            if name.lower() not in have and name != known_since.COLUMN]


def register(table: LakeTable, paths: list[str]) -> None:
    """Add ``paths`` (in the table's day folders) to the events table, inside the open transaction."""
    table.lake.execute("CALL ducklake_add_data_files(?, ?, ?, hive_partitioning => true, "
                       "allow_missing => true)", [table.lake.name, table.name, paths])


def remove_files(lake_files: list[LakeFile], folder: Folder) -> None:
    """Delete lake files that will not be registered (a short batch, a batch promoted by copy)
    from the table's ``folder``."""
    for entry in lake_files:
        folder.delete_uri(str(entry["uri"]))


def table_folder(settings: ResolvedSettings, table: TableSpec) -> Folder:
    """``table``'s folder in the data path: where DuckLake writes its own files."""
    return lake_table_folder(folder_of(settings.data_path, settings.storage), table.name)
