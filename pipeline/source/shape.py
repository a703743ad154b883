"""Is the source table shaped the way the pipeline reads it? Checked before anything is created
or staged, so a renamed, dropped or retyped column is a plain error naming it, not a Spark
stack trace after the lake was set up."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg

from pipeline.errors import ConfigError, TerminalError
from pipeline.sqltext import one_row

log = logging.getLogger(__name__)

# The five columns of an event, in the order the source, the staged files and the lake hold them;
# columns the source adds later (schema drift) follow them.
EVENT_COLUMNS = ("event_id", "event_type", "event_timestamp", "details", "created_at")

# Staged column -> Postgres expression. event_id in its canonical text form, details as the
# jsonb's own text; timestamps as instants (Parquet TIMESTAMP(isAdjustedToUTC=true, MICROS)):
# ::timestamptz is a no-op on a timestamptz column and reads a naive one as wall-clock time in
# the session's zone, which every reader sets to the source's (pipeline.source.connect).
STAGED_COLUMNS = {  # in EVENT_COLUMNS' order (checked below)
    "event_id": "event_id::text",
    "event_type": "event_type",
    "event_timestamp": "event_timestamp::timestamptz",
    "details": "details::text",
    "created_at": "created_at::timestamptz",
}

# The arrow reader's columns for a zero-copy lake that holds event_id as UUID and details as JSON:
# the source's own uuid and json/jsonb values (zero-copy needs those source types, see
# pipeline.promote.zero_copy.blocker), which ADBC hands over as Arrow's UUID and JSON types and
# pyarrow writes as Parquet's UUID and JSON logical types (what DuckLake registers as UUID/JSON).
TYPED_COLUMNS = {**STAGED_COLUMNS, "event_id": "event_id", "details": "details"}


# column -> the Postgres types it may have (udt names); None: any type with a text form
EXPECTED = {
    "event_id": None,  # uuid or text: validated row by row at promotion
    "event_type": None,
    "event_timestamp": ("timestamptz", "timestamp"),
    "details": None,  # jsonb, json or text: validated row by row
    "created_at": ("timestamptz", "timestamp"),
}
assert tuple(STAGED_COLUMNS) == tuple(EXPECTED) == EVENT_COLUMNS


def source_columns(conn: psycopg.Connection, qualified: str) -> dict[str, str]:
    schema, table = qualified.split(".")
    return dict(conn.execute(
        "SELECT column_name, udt_name FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", (schema, table)).fetchall())


@dataclass(frozen=True)
class IdShape:
    """How the source's ids are read: a uuid column or text spelling one; unique or not."""

    uuid_typed: bool
    unique: bool  # a primary key or unique index on event_id

    @classmethod
    def read(cls, conn: psycopg.Connection, qualified: str) -> IdShape:
        return cls(uuid_typed=source_columns(conn, qualified).get("event_id") == "uuid",
                   unique=has_unique_index(conn, qualified, "event_id"))


def has_row_versions(conn: psycopg.Connection, qualified: str) -> bool:
    """Does the relation's every row carry the id of the transaction that wrote it (``xmin``): a
    table or a partitioned one, not a view or a foreign table?"""
    return bool(one_row(conn.execute("SELECT relkind IN ('r', 'p') FROM pg_class WHERE oid = %s::regclass",
                                     (qualified,)))[0])


def has_unique_index(conn: psycopg.Connection, qualified: str, column: str) -> bool:
    """Is ``column`` alone a primary key or unique index (so no two rows share a value)?"""
    schema, table = qualified.split(".")
    return one_row(conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid "
        "AND a.attnum = i.indkey[0] WHERE n.nspname = %s AND c.relname = %s AND i.indisunique "
        "AND i.indnkeyatts = 1 AND i.indpred IS NULL AND a.attname = %s)",
        (schema, table, column)))[0]


# Postgres type (udt name) of an added column -> its lake type; anything else stays text.
# Added columns travel through staging as text and are cast by the promoter (TRY_CAST).
LAKE_TYPES = {"int2": "BIGINT", "int4": "BIGINT", "int8": "BIGINT", "float4": "DOUBLE",
              "float8": "DOUBLE", "numeric": "DOUBLE", "bool": "BOOLEAN", "timestamptz": "TIMESTAMPTZ",
              "timestamp": "TIMESTAMPTZ", "date": "DATE", "uuid": "UUID", "json": "JSON", "jsonb": "JSON"}


def lake_type(udt: str) -> str:
    return LAKE_TYPES.get(udt, "VARCHAR")


def check_shape(conn: psycopg.Connection, qualified: str, drift: str = "add",
                arrival_column: str | None = None) -> dict[str, str]:
    """Raise :class:`TerminalError` for a missing or retyped column (the five the pipeline reads,
    and the arrival column); return the columns the source has beyond the five, with their lake
    types (``drift="add"``: they are loaded too; ``"ignore"``: logged and not loaded, so the
    result is empty)."""
    columns = source_columns(conn, qualified)
    if arrival_column and columns.get(arrival_column) not in ("timestamptz", "timestamp"):
        found = f"is {columns[arrival_column]}" if arrival_column in columns else "does not exist"
        raise ConfigError(
            f"SOURCE_ARRIVAL_COLUMN {arrival_column!r}: the column {qualified}.{arrival_column} {found}, "
            "not a timestamp. Nothing was read, staged or created.",
            "Name a timestamp column the database sets when a row is written (e.g. created_at "
            "timestamptz DEFAULT now()), or set SOURCE_ARRIVAL_COLUMN=none to read the whole look-back.")
    missing = [name for name in EXPECTED if name not in columns]
    if missing:
        raise TerminalError(
            f"The source table {qualified} has no column {', '.join(missing)} (it has: "
            f"{', '.join(columns)}). Nothing was read, staged or created.",
            f"The pipeline reads {', '.join(EXPECTED)}. Restore the column, or point SOURCE_TABLE at a "
            "view that provides it under that name; then run again — nothing is lost meanwhile.")
    for name, allowed in EXPECTED.items():
        if allowed is not None and columns[name] not in allowed:
            raise TerminalError(
                f"The source column {qualified}.{name} is {columns[name]}, not a timestamp. Nothing was "
                "read, staged or created.",
                f"Make {name} timestamptz (or timestamp, read as UTC), or point SOURCE_TABLE at a view "
                "that casts it; then run again.")
    extra_columns = {name: lake_type(udt) for name, udt in columns.items() if name not in EXPECTED}
    if extra_columns and drift == "ignore":
        log.warning("source columns %s are not loaded (SCHEMA_DRIFT=ignore)", ", ".join(extra_columns))
        return {}
    return extra_columns
