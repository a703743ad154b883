"""The lake's tables: the events table (partitioned by event day) and the ops tables."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from pipeline import actions
from pipeline.columns import EVENT_COLUMNS, ID, TIME
from pipeline.errors import TerminalError
from pipeline.lake import known_since, ownership, type_views, validate
from pipeline.lake.identity import events_column_types, table_names
from pipeline.lake.payload_fields import (
    DETAILS,
    KeyShare,
    column_of,
    columns_sql,
    created_columns,
    record_sql,
    typed_keys,
)
from pipeline.lake.session import Lake, LakeTable
from pipeline.lake.transaction import transaction
from pipeline.settings.model import Promotion, Reader
from pipeline.sqltext import one_row, quote_ident, quote_literal, read_sql, split_statements

log = logging.getLogger(__name__)

# job history is not a lake table: see jobs.py
OPS_TABLES = ("batches", "lake_identity", "quarantine", "erasures", "erased_ids", "typed_keys",
              "source_columns", "schema_changes")
# ops.batches columns added after lakes existed: a lake made before gets them on its next write session
# the ops tables' columns a lake made by an older version may lack (sql/lake_events.sql makes them)
ADDED_OPS_COLUMNS = {
    "batches": {"arrival_mark": "TIMESTAMPTZ", "freshness_p50": "DOUBLE", "freshness_p95": "DOUBLE",
                "rows_behind_mark": "BIGINT", "source": "VARCHAR", "source_ids": "BIGINT",
                "source_id_checksum": "VARCHAR", "snapshot_xmin": "BIGINT", "backfill": "BOOLEAN",
                "source_filenode": "BIGINT"},
    "quarantine": {"source_columns": "JSON"},
}


def partition_by(time_column: str = TIME) -> str:
    """The events table's partitioning: by the day of its time column."""
    column = quote_ident(time_column)
    return f"year({column}), month({column}), day({column})"


PARTITION_KEYS = ("year", "month", "day")  # the hive folder names DuckLake writes for partition_by()


def column_types(promotion: Promotion, reader: Reader = Reader.ARROW) -> dict[str, str]:
    """The events table's id and details types for a new lake: UUID and JSON, except a zero-copy
    lake made by Spark's JDBC reader. DuckLake registers a Parquet file only when its column types
    equal the table's, and Spark's own writer has neither Parquet's UUID nor its JSON type, so
    such a lake keeps both as text (the arrow reader writes both types)."""
    if promotion is Promotion.ZERO_COPY and reader is Reader.JDBC:
        return {"id_type": "VARCHAR", "details_type": "VARCHAR"}
    return {"id_type": "UUID", "details_type": "JSON"}


def insert_columns_sql(table: LakeTable, have: Mapping[str, str], rows: str,
                       extra_columns: Iterable[str] = ()) -> str:
    """``INSERT INTO`` the events table from ``rows`` (a relation of staged column names): each of
    the five the table holds (``have``: its columns), under its own name (:mod:`pipeline.columns`),
    then ``extra_columns``, then each typed payload key's column (:mod:`.payload_fields`)."""
    pairs = [(quote_ident(table.own(name)), f"s.{name}") for name in EVENT_COLUMNS if table.own(name) in have]
    pairs += [(quote_ident(name), f"s.{quote_ident(name)}") for name in extra_columns]
    if DETAILS in have:  # each typed payload key's column, from the details the row gets
        typed = [key for key in typed_keys(table) if key.column in have]
        pairs += columns_sql(typed, f"CAST(s.details AS {have[DETAILS]})")
    return (f"INSERT INTO {table.events_table} ({', '.join(own for own, _ in pairs)}) "
            f"SELECT {', '.join(value for _, value in pairs)} FROM {rows} s")


def _tables_exist(table: LakeTable) -> tuple[bool, bool]:
    """(events table exists, every ops table exists)."""
    found = table_names(table.lake)
    ops = all((table.lake.ops_schema, t) in found for t in OPS_TABLES)
    return ("main", table.name) in found, ops


def ensure_tables(table: LakeTable, new_types: Mapping[str, str], *, recreate_dropped: bool = False,
                  own_columns: Mapping[str, str] | None = None,
                  typed: Callable[[], Sequence[KeyShare]] | None = None,
                  types: Callable[[], Mapping[str, Sequence[str]]] | None = None) -> None:
    """Create schemas, the events table (partitioned by event day; ``new_types``: its id and
    details types, :func:`column_types`) and the ops tables, and claim the data folder for this
    lake (:mod:`.ownership`). A table with its own id and time columns (SOURCE_TABLES) is made
    with ``own_columns`` (its source's columns and lake types, besides the id), all at once, by
    the load that read them; without them it is left for that load.

    Two first runs at once would both try to create them; a lock makes one wait for the
    other, and the re-check inside it then finds the tables. An events table that is gone
    although ``ops.batches`` holds its watermark was dropped by hand: recreating it silently
    would reload only the look-back, so that stops with the way back, unless
    ``recreate_dropped`` (``--reconcile``, which can reload the whole history). ``typed``: the
    payload keys a table made now types (asked only then, under the lock): their columns are made
    with it (:mod:`.payload_fields`); ``types``: its event types' keys, its views by event type made
    with it (:mod:`.type_views`).
    """

    events_exists, ops_exists = _tables_exist(table)
    if events_exists:
        _name_inlining_columns(table)  # a process stopped between a table's first two commits
        _refuse_other_columns(table)
    makes_events = (table.id_column, table.time_column) == (ID, TIME) or own_columns is not None
    if not ops_exists or (makes_events and not events_exists):
        ownership.claim(table.lake)  # a lake is never created on another lake's data folder
        if makes_events and not events_exists and ops_exists and not recreate_dropped:
            _stop_if_dropped(table)
        _create_tables(table, new_types, own_columns if makes_events else None, makes_events, typed, types)
    ownership.claim(table.lake)  # the folder is this lake's before anything is written to it
    _add_ops_columns(table.lake)
    if events_exists:
        _keep_known_since(table)  # after the ops tables: its view reads ops.batches


def _refuse_other_columns(table: LakeTable) -> None:
    """A lake table loaded by other id or time columns than the settings name (SOURCE_TABLES'
    ``schema.table:time:id`` changed) is refused: its watermark and partitions are the old column's."""
    have = events_column_types(table)
    missing = [column for column in (table.id_column, table.time_column) if column not in have]
    dated_by = _partition_column(table)
    if not missing and dated_by is not None and dated_by != table.time_column:
        raise TerminalError(
            f"The lake table {table.events_table} was loaded dating rows by {dated_by} (its watermark and "
            f"day partitions follow it), not by {table.time_column}. Nothing was read or written.",
            f"Name {dated_by} as the table's time column in SOURCE_TABLES (schema.table:{dated_by}:"
            f"{table.id_column}), or load it under another name.")
    if missing:
        raise TerminalError(
            f"The lake table {table.events_table} has no column {', '.join(missing)}: it was loaded naming "
            f"and dating rows by other columns (it has {', '.join(have)}). Nothing was read or written.",
            "Name the table's columns as it was loaded (SOURCE_TABLES=schema.table:time_column:id_column), "
            "or load it under another name: a lake table keeps the columns its watermark and partitions "
            "follow.")


def _keeps_known_since(table: LakeTable, columns: Iterable[str]) -> bool:
    """Has the table (of ``columns``) its first-snapshot column and its ``known`` view
    (:mod:`.known_since`)?"""
    views = table.lake.execute("SELECT count(*) FROM duckdb_views() WHERE database_name = ? "
                               "AND schema_name = ? AND view_name = ?",
                               [table.lake.name, known_since.SCHEMA, table.name])
    return bool(one_row(views)[0]) and known_since.has_column(columns)


def _keep_known_since(table: LakeTable) -> None:
    """Give a table made by an older version its first-snapshot column and ``known`` view (one
    snapshot; its rows' own snapshots are their first, no rewrite having moved them yet). A table
    whose own columns hide DuckLake's per-row snapshot has neither (said once, as it is made)."""
    columns = events_column_types(table)
    if known_since.view_possible(columns) is not None or _keeps_known_since(table, columns):
        return
    with table.lake.lock_lake("setup"):
        columns = events_column_types(table)  # another process may have made them meanwhile
        if _keeps_known_since(table, columns):
            return
        with transaction(table.lake, f"keep {table.name}'s rows' first snapshots (view known.{table.name})"):
            if not known_since.has_column(columns):
                table.lake.execute(f"ALTER TABLE {table.events_table} ADD COLUMN "
                                   f"{quote_ident(known_since.COLUMN)} BIGINT")
            for statement in known_since.view_sql(table):
                table.lake.execute(statement)


def _partition_column(table: LakeTable) -> str | None:
    """The column the events table's day partitions follow (its time column when it was made)."""
    metadata = table.lake.metadata()
    row = table.lake.execute(
        f"SELECT c.column_name FROM {metadata}.ducklake_table t "
        f"JOIN {metadata}.ducklake_schema s USING (schema_id) "
        f"JOIN {metadata}.ducklake_partition_info p ON p.table_id = t.table_id AND p.end_snapshot IS NULL "
        f"JOIN {metadata}.ducklake_partition_column pc ON pc.partition_id = p.partition_id "
        "AND pc.table_id = t.table_id "
        f"JOIN {metadata}.ducklake_column c ON c.column_id = pc.column_id AND c.table_id = t.table_id "
        "AND c.end_snapshot IS NULL WHERE s.schema_name = 'main' AND t.table_name = ? "
        "AND t.end_snapshot IS NULL AND s.end_snapshot IS NULL LIMIT 1", [table.name]).fetchone()
    return row[0] if row else None


def _missing_ops_columns(lake: Lake) -> list[tuple[str, str]]:
    """(ops table, column) pairs of :data:`ADDED_OPS_COLUMNS` the lake lacks."""
    have = set(lake.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = ?",
        [lake.name, lake.ops_schema]).fetchall())
    return [(table, name) for table, columns in ADDED_OPS_COLUMNS.items() for name in columns
            if (table, name) not in have]


def _add_ops_columns(lake: Lake) -> None:
    """Give a lake made by an older version the ops tables' columns it lacks (one snapshot)."""
    if not _missing_ops_columns(lake):
        return
    with lake.lock_lake("setup"):
        missing = _missing_ops_columns(lake)
        if not missing:
            return
        with transaction(lake, "add " + ", ".join(f"{t}.{n}" for t, n in missing) + " to the ops tables"):
            for table, name in missing:
                lake.execute(f"ALTER TABLE {lake.ops(table)} ADD COLUMN {quote_ident(name)} "
                             f"{ADDED_OPS_COLUMNS[table][name]}")


def _create_tables(table: LakeTable, new_types: Mapping[str, str], own_columns: Mapping[str, str] | None,
                   makes_events: bool, typed: Callable[[], Sequence[KeyShare]] | None = None,
                   types: Callable[[], Mapping[str, Sequence[str]]] | None = None) -> None:
    with table.lake.lock_lake("setup"):
        events_exists, ops_exists = _tables_exist(table)
        if (events_exists or not makes_events) and ops_exists:
            return
        made_now = makes_events and not events_exists and (own_columns is None or DETAILS in own_columns)
        keys = list(typed()) if typed is not None and made_now else []
        with transaction(table.lake, "create lake tables"):
            for statement in split_statements(read_sql("lake_events.sql")):
                if "{lake}.main.{table}" in statement:
                    if not makes_events:
                        continue
                    if own_columns is not None:  # the table's own columns, its id first
                        columns = {table.id_column: "{id_type}", **own_columns,
                                   **{column_of(key.key): "VARCHAR" for key in keys},
                                   known_since.COLUMN: "BIGINT"}
                        _create_own(table, {name: kind.format(**new_types) for name, kind in columns.items()})
                        continue
                table.lake.execute(statement.format(**new_types, lake=quote_ident(table.lake.name),
                                                    table=quote_ident(table.name),
                                                    ops=quote_ident(table.lake.ops_schema),
                                                    typed_columns=created_columns(keys)
                                                    + known_since.column_sql()))
            for key in keys:
                table.lake.execute(record_sql(table),
                                   [table.name, key.key, column_of(key.key), key.json_type])
            if makes_events and not events_exists:
                table.lake.execute(f"ALTER TABLE {table.events_table} SET PARTITIONED BY "
                                   f"({partition_by(table.time_column)})")
                have = events_column_types(table)
                if (why_not := known_since.view_possible(have)) is None:
                    for statement in known_since.view_sql(table):
                        table.lake.execute(statement)
                else:
                    log.info("%s has no view known.%s: %s", table.name, table.name, why_not)
                if types is not None and made_now and type_views.has_types(table, have):
                    changes = type_views.wanted_changes(table, types(), have, {})
                    typed_columns = {key.key: column_of(key.key) for key in keys}
                    for statement in type_views.statements(table, changes, typed_columns, have):
                        table.lake.execute(statement)
        if makes_events and own_columns is not None:
            _rename_stand_ins(table)


# The columns DuckLake keeps a table's inlined rows beside: a table holds a column of one of these
# names only with inlining off (a source table with a row_id column could not be created)
INLINING_COLUMNS = ("row_id", "begin_snapshot", "end_snapshot")


_STAND_IN = re.compile(r"^_*_el_inlining_(" + "|".join(INLINING_COLUMNS) + ")$", re.IGNORECASE)


def _create_own(table: LakeTable, columns: Mapping[str, str]) -> None:
    """The table of a source table's own ``columns`` (name -> lake type). One named as DuckLake's
    inlined rows' (:data:`INLINING_COLUMNS`) is made under a stand-in name, renamed by
    :func:`_name_inlining_columns` once the table is committed: DuckLake refuses the name while
    the table inlines rows, and sets no option of a table made in the same transaction."""
    prefix = validate.Helpers.beside(columns).prefix
    table.lake.execute(f"CREATE TABLE IF NOT EXISTS {table.events_table} (" + ", ".join(
        f"{quote_ident(f'{prefix}inlining_{name}' if name.lower() in INLINING_COLUMNS else name)} {kind}"
        for name, kind in columns.items()) + ")")


def _name_inlining_columns(table: LakeTable) -> None:
    """Give the table's stand-in columns (:func:`_create_own`) their names, if it has any (one
    process does, under the setup lock)."""
    if any(_STAND_IN.match(name) for name in events_column_types(table)):
        with table.lake.lock_lake("setup"):
            _rename_stand_ins(table)


def _rename_stand_ins(table: LakeTable) -> None:
    """Give the table's stand-in columns their names, its inlining off, in one commit."""
    stand_ins = {name: found.group(1) for name in events_column_types(table)
                 if (found := _STAND_IN.match(name))}
    if not stand_ins:
        return
    with transaction(table.lake,
                     f"name {', '.join(stand_ins.values())} (columns of DuckLake's inlined rows)"):
        without_inlining(table)
        for stand_in, name in stand_ins.items():
            table.lake.execute(f"ALTER TABLE {table.events_table} RENAME COLUMN {quote_ident(stand_in)} "
                               f"TO {quote_ident(name)}")


def without_inlining(table: LakeTable) -> None:
    """Turn DuckLake's data inlining off for the table: its rows go to Parquet files, whatever the
    batch's size, and it may hold columns named as :data:`INLINING_COLUMNS`."""
    table.lake.execute(f"CALL {quote_ident(table.lake.name)}.set_option('data_inlining_row_limit', 0, "
                       f"table_name => {quote_literal(table.name)})")


def _stop_if_dropped(lake: LakeTable) -> None:
    [[batches, watermark]] = lake.lake.execute(
        f"SELECT count(*), max(max_event_timestamp) FROM {lake.lake.batches_table} WHERE table_name = ?",
        [lake.name]).fetchall()
    if not batches:
        return
    metadata = lake.lake.metadata()
    [[ended]] = lake.lake.execute(
        f"SELECT max(t.end_snapshot) FROM {metadata}.ducklake_table t JOIN {metadata}.ducklake_schema s "
        "USING (schema_id) WHERE s.schema_name = 'main' AND t.table_name = ?",
        [lake.name]).fetchall()
    table = lake.name
    restore = (f"time travel to snapshot {ended - 1}, the last that had it: "
               f"{actions.WRITE} {actions.SQL} \"CREATE TABLE "
               f"{table} AS SELECT * FROM {table} AT (VERSION => {ended - 1})\"; or " if ended else "")
    raise TerminalError(
        f"The lake table {lake.events_table} is missing, although {batches} promoted batch(es) are "
        f"recorded up to watermark {watermark} (it was dropped). Nothing was created or loaded: a new "
        "table would only get the look-back window again, and the rest would be missing silently.",
        f"Bring it back: {restore}reload it from the source with "
        f"{actions.RECONCILE} {actions.SINCE} all (which creates it "
        "again and backfills every row the source still has).")


def quarantined_rows(table: LakeTable) -> int:
    """Rows of this table in ``ops.quarantine`` (0 before the table exists)."""
    if (table.lake.ops_schema, "quarantine") not in table_names(table.lake):
        return 0
    return one_row(table.lake.execute(f"SELECT count(*) FROM {table.lake.quarantine_table} "
                                      "WHERE table_name = ?", [table.name]))[0]
