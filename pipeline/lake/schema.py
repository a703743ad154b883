"""The lake's tables: the events table (partitioned by event day) and the ops tables."""

from __future__ import annotations

import duckdb

from pipeline import actions
from pipeline.errors import TerminalError
from pipeline.lake import locks, ownership
from pipeline.lake.identity import table_names
from pipeline.lake.transaction import transaction
from pipeline.settings import ResolvedSettings, Settings
from pipeline.settings.model import Promotion, Reader
from pipeline.sqltext import one_row, quote_ident, read_sql, split_statements

OPS_TABLES = ("batches", "lake_identity", "quarantine")  # job history is not a lake table: see jobs.py
# ops.batches columns added after lakes existed: a lake made before gets them on its next write session
ADDED_BATCH_COLUMNS = {"arrival_mark": "TIMESTAMPTZ", "freshness_p50": "DOUBLE", "freshness_p95": "DOUBLE",
                       "rows_behind_mark": "BIGINT", "source": "VARCHAR", "source_ids": "BIGINT",
                       "source_id_checksum": "VARCHAR", "snapshot_xmin": "BIGINT"}
PARTITION_BY = "year(event_timestamp), month(event_timestamp), day(event_timestamp)"
PARTITION_KEYS = ("year", "month", "day")  # the hive folder names DuckLake writes for PARTITION_BY


def column_types(promotion: Promotion, reader: Reader = Reader.ARROW) -> dict[str, str]:
    """The events table's id and details types for a new lake: UUID and JSON, except a zero-copy
    lake made by Spark's JDBC reader. DuckLake registers a Parquet file only when its column types
    equal the table's, and Spark's own writer has neither Parquet's UUID nor its JSON type, so
    such a lake keeps both as text (the arrow reader writes both types)."""
    if promotion is Promotion.ZERO_COPY and reader is Reader.JDBC:
        return {"id_type": "VARCHAR", "details_type": "VARCHAR"}
    return {"id_type": "UUID", "details_type": "JSON"}


def events_column_types(con: duckdb.DuckDBPyConnection, settings: Settings) -> dict[str, str]:
    """The events table's columns and their types as the lake holds them."""
    return dict(con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = ? "
        "AND schema_name = 'main' AND table_name = ?", [settings.lake_name, settings.lake_table]).fetchall())


def _tables_exist(con: duckdb.DuckDBPyConnection, settings: Settings) -> tuple[bool, bool]:
    """(events table exists, every ops table exists)."""
    found = table_names(con, settings)
    ops = all((settings.ops_schema, t) in found for t in OPS_TABLES)
    return ("main", settings.lake_table) in found, ops


def ensure_tables(con: duckdb.DuckDBPyConnection, settings: ResolvedSettings, *,
                  recreate_dropped: bool = False) -> None:
    """Create schemas, the events table (partitioned by event day) and the ops tables, and
    claim the data folder for this lake (:mod:`.ownership`).

    Two first runs at once would both try to create them; a lock makes one wait for the
    other, and the re-check inside it then finds the tables. An events table that is gone
    although ``ops.batches`` holds its watermark was dropped by hand: recreating it silently
    would reload only the look-back, so that stops with the way back, unless
    ``recreate_dropped`` (``--reconcile``, which can reload the whole history).
    """

    events_exists, ops_exists = _tables_exist(con, settings)
    if not (events_exists and ops_exists):
        ownership.claim(con, settings)  # a lake is never created on another lake's data folder
        if not events_exists and ops_exists and not recreate_dropped:
            _stop_if_dropped(con, settings)
        _create_tables(con, settings)
    ownership.claim(con, settings)  # the folder is this lake's before anything is written to it
    _add_batch_columns(con, settings)


def _missing_batch_columns(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[str]:
    have = {name for (name,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = ? "
        "AND table_name = 'batches'", [settings.lake_name, settings.ops_schema]).fetchall()}
    return [name for name in ADDED_BATCH_COLUMNS if name not in have]


def _add_batch_columns(con: duckdb.DuckDBPyConnection, settings: ResolvedSettings) -> None:
    """Give a lake made by an older version the ``ops.batches`` columns it lacks (one snapshot)."""
    if not _missing_batch_columns(con, settings):
        return
    with locks.hold(settings, "setup"):
        missing = _missing_batch_columns(con, settings)
        if not missing:
            return
        with transaction(con, settings.lake_name, f"add {', '.join(missing)} to ops.batches"):
            for name in missing:
                con.execute(f"ALTER TABLE {settings.batches_table} ADD COLUMN {quote_ident(name)} "
                            f"{ADDED_BATCH_COLUMNS[name]}")


def _create_tables(con: duckdb.DuckDBPyConnection, settings: ResolvedSettings) -> None:
    with locks.hold(settings, "setup"):
        events_exists, ops_exists = _tables_exist(con, settings)
        if events_exists and ops_exists:
            return
        with transaction(con, settings.lake_name, "create lake tables"):
            for statement in split_statements(read_sql("lake_events.sql")):
                con.execute(statement.format(**column_types(settings.promotion, settings.spark.reader),
                                             lake=quote_ident(settings.lake_name),
                                             table=quote_ident(settings.lake_table),
                                             ops=quote_ident(settings.ops_schema)))
            if not events_exists:
                con.execute(f"ALTER TABLE {settings.events_table} SET PARTITIONED BY ({PARTITION_BY})")


def _stop_if_dropped(con: duckdb.DuckDBPyConnection, settings: ResolvedSettings) -> None:
    [[batches, watermark]] = con.execute(
        f"SELECT count(*), max(max_event_timestamp) FROM {settings.batches_table} WHERE table_name = ?",
        [settings.lake_table]).fetchall()
    if not batches:
        return
    metadata = one_row(con.execute("SELECT getvariable('lake_metadata')"))[0]
    [[ended]] = con.execute(
        f"SELECT max(t.end_snapshot) FROM {metadata}.ducklake_table t JOIN {metadata}.ducklake_schema s "
        "USING (schema_id) WHERE s.schema_name = 'main' AND t.table_name = ?",
        [settings.lake_table]).fetchall()
    table = settings.lake_table
    restore = (f"time travel to snapshot {ended - 1}, the last that had it: "
               f"{actions.WRITE} {actions.SQL} \"CREATE TABLE "
               f"{table} AS SELECT * FROM {table} AT (VERSION => {ended - 1})\"; or " if ended else "")
    raise TerminalError(
        f"The lake table {settings.events_table} is missing, although {batches} promoted batch(es) are "
        f"recorded up to watermark {watermark} (it was dropped). Nothing was created or loaded: a new "
        "table would only get the look-back window again, and the rest would be missing silently.",
        f"Bring it back: {restore}reload it from the source with "
        f"{actions.RECONCILE} {actions.SINCE} all (which creates it "
        "again and backfills every row the source still has).")


def quarantined_rows(con: duckdb.DuckDBPyConnection, settings: Settings) -> int:
    """Rows of this table in ``ops.quarantine`` (0 before the table exists)."""
    if (settings.ops_schema, "quarantine") not in table_names(con, settings):
        return 0
    return one_row(con.execute(f"SELECT count(*) FROM {settings.quarantine_table} WHERE table_name = ?",
                               [settings.lake_table]))[0]
