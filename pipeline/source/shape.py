"""Is the source table shaped the way the pipeline reads it? Checked before anything is created
or staged, so a renamed, dropped or retyped column is a plain error naming it, not a Spark
stack trace after the lake was set up."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import psycopg

from pipeline.columns import (
    CONVERTIBLE_WALL_TIMES,
    EVENT_COLUMNS,
    ID,
    OPTIONAL,
    OPTIONAL_LAKE_TYPES,
    TIME,
    WallClock,
    canonical_relation,
)
from pipeline.errors import ConfigError, TerminalError
from pipeline.id_checksum import ID_TYPES, IdKind
from pipeline.settings import SchemaChanges, TableSpec
from pipeline.source.window import DATED
from pipeline.sqltext import one_row, quote_ident, quote_qualified

log = logging.getLogger(__name__)


# Staged column -> Postgres expression. event_id in its canonical text form, details as the
# jsonb's own text; timestamps as instants (Parquet TIMESTAMP(isAdjustedToUTC=true, MICROS)):
# ::timestamptz is a no-op on a timestamptz column and reads a naive one as wall-clock time in
# the session's zone, which every reader sets to the source's (pipeline.source.connect).
STAGED_COLUMNS = {  # in EVENT_COLUMNS' order (checked below)
    "event_id": "event_id::text",
    "event_type": "event_type",
    # ±infinity, and an instant before year 1 or past DuckDB's last, is no time
    # (pipeline.source.window.UNDATED): staged as none, and quarantined
    "event_timestamp": f"CASE WHEN {DATED} THEN event_timestamp::timestamptz END",
    "details": "details::text",
    "created_at": "created_at::timestamptz",
}

# The arrow reader's columns for a zero-copy lake that holds event_id as UUID and details as JSON:
# the source's own uuid and json/jsonb values (zero-copy needs those source types, see
# pipeline.promote.zero_copy.blocker), which ADBC hands over as Arrow's UUID and JSON types and
# pyarrow writes as Parquet's UUID and JSON logical types (what DuckLake registers as UUID/JSON).
TYPED_COLUMNS = {**STAGED_COLUMNS, "event_id": "event_id", "details": "details"}


assert tuple(STAGED_COLUMNS) == EVENT_COLUMNS
DEFAULT_ARRIVAL_COLUMN = "created_at"


def source_columns(conn: psycopg.Connection, qualified: str) -> tuple[dict[str, str], dict[str, int]]:
    """The table's columns with their Postgres types (udt names), and each one's number (attnum,
    which information_schema calls ordinal_position): what a column keeps when it is renamed."""
    schema, table = qualified.split(".")
    rows = conn.execute(
        "SELECT column_name, udt_name, ordinal_position FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", (schema, table)).fetchall()
    return {name: udt for name, udt, _ in rows}, {name: int(number) for name, _, number in rows}


@dataclass(frozen=True)
class SourceRelation:
    """One source table as every stage reads it: its own columns, with its id column also read
    as ``event_id``, its time column as ``event_timestamp`` and NULL for an optional column it lacks
    (:mod:`pipeline.columns`). ``sql`` is what a query names in place of the table."""

    qualified: str  # schema.table
    id_column: str = ID
    time_column: str = TIME
    absent: tuple[str, ...] = ()  # of OPTIONAL, the columns the table lacks
    row_versions: bool = True  # a table (xmin, ctid), not a view or a foreign table
    # its columns and their Postgres types (udt names), as read with it: what the checks of its shape,
    # its ids and its arrival column look at (read once, in the reader's snapshot)
    types: Mapping[str, str] = field(default_factory=dict, compare=False)
    # the session's zone is the time zone database's (a naive time column's index serves ranges)
    zone_known: bool = True
    # the database holds text as UTF-8 (or as bytes: SQL_ASCII), the bytes DuckDB hashes; else the
    # content proof hashes its text converted to UTF-8 (a LATIN1 'café' was "changed" for ever)
    utf8: bool = True
    # the columns' identities: the relation's oid and each column's attnum, which a rename keeps and
    # a drop-and-recreate of the table does not (pipeline.promote.schema_changes)
    oid: int | None = field(default=None, compare=False)
    attnums: Mapping[str, int] = field(default_factory=dict, compare=False)
    # its storage (pg_class.relfilenode; None: a partitioned table, a view): a rewrite changes it
    filenode: int | None = field(default=None, compare=False)

    @classmethod
    def read(cls, conn: psycopg.Connection, qualified: str, id_column: str = ID,
             time_column: str = TIME) -> SourceRelation:
        columns, attnums = source_columns(conn, qualified)
        naive = columns.get(time_column) == "timestamp"
        zone_known = not naive or known_zone(one_row(conn.execute("SHOW TimeZone"))[0])
        utf8 = one_row(conn.execute("SHOW server_encoding"))[0] in ("UTF8", "SQL_ASCII")
        oid, row_versions, filenode = relation_kind(conn, qualified) if columns else (None, False, None)
        return cls(qualified, id_column, time_column, tuple(name for name in OPTIONAL if name not in columns),
                   row_versions, columns, zone_known, utf8, oid, attnums, filenode)

    @classmethod
    def of(cls, conn: psycopg.Connection, table: TableSpec) -> SourceRelation:
        """``table`` as the source holds it."""
        return cls.read(conn, table.qualified, table.id_column, table.time_column)

    @property
    def wall_clock(self) -> WallClock | None:
        """The naive time column's reading (None: the time column holds instants)."""
        if self.types.get(self.time_column) != "timestamp":
            return None
        name, taken = "_el_wall_time", [column.lower() for column in self.types]
        while any(column.startswith(name) for column in taken):
            name = "_" + name
        return WallClock(name, tuple(self.types), self.zone_known)

    @property
    def sql(self) -> str:
        return canonical_relation(quote_qualified(self.qualified), self.id_column, self.time_column,
                                  self.absent, system_columns=self.row_versions, wall_clock=self.wall_clock)


@dataclass(frozen=True)
class IdShape:
    """How the source's ids are read: a uuid column, text spelling one, or an integer key; unique or not."""

    kind: IdKind
    unique: bool  # a primary key or unique index on the id column

    @classmethod
    def read(cls, conn: psycopg.Connection, source: SourceRelation, lake_type: str | None) -> IdShape:
        """The source's ids, loaded into a lake id column of type ``lake_type`` (None: not made yet)."""
        return cls(kind=IdKind.of_source(source.types.get(source.id_column), source.id_column, lake_type),
                   unique=has_unique_index(conn, source.qualified, source.id_column))


def known_zone(zone: str) -> bool:
    """Is ``zone`` (a session's TimeZone) one of the time zone database's, not a POSIX rule?"""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def relation_kind(conn: psycopg.Connection, qualified: str) -> tuple[int, bool, int | None]:
    """The relation's oid; whether its every row carries the id of the transaction that wrote it
    (``xmin``): a table or a partitioned one, not a view or a foreign table; and its storage
    (relfilenode: a table's, which a rewrite replaces; None for any other)."""
    oid, versions, filenode = one_row(conn.execute(
        "SELECT oid, relkind IN ('r', 'p'), CASE WHEN relkind = 'r' THEN relfilenode::bigint END "
        "FROM pg_class WHERE oid = %s::regclass", (quote_qualified(qualified),)))
    return int(oid), bool(versions), filenode


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


def values_before(conn: psycopg.Connection, source: SourceRelation,
                  extra_columns: Mapping[str, str]) -> dict[str, str]:
    """Of ``extra_columns`` (name -> lake type), the ones the source added with a default, and the
    value the rows written before hold there (Postgres' "missing value"), as staging carries it:
    the lake adds the column with it, so those rows read what the source's do (added bare, they
    were NULL in the lake and changed for the content proof)."""
    schema, table = source.qualified.split(".")
    found = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), (a.attmissingval::text::text[])[1] "
        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON "
        "n.oid = c.relnamespace JOIN pg_type t ON t.oid = a.atttypid WHERE n.nspname = %s AND "
        "c.relname = %s AND a.atthasmissing AND NOT a.attisdropped AND a.attnum > 0 "
        # the value is read out of a one-element array: its type's elements must be comma-separated
        # (a box's are not, and the plan stopped on '(1'); one that is not stays NULL, and changed
        "AND t.typdelim = ','", (schema, table)).fetchall()
    added = [(name, kind, value) for name, kind, value in found
             if name in extra_columns and value is not None]
    if not added:
        return {}
    values = ", ".join(f"%s::{kind} AS {quote_ident(name)}" for name, kind, _ in added)
    items = staged_extra({name: extra_columns[name] for name, _, _ in added})
    staged = one_row(conn.execute(f"SELECT {', '.join(items)} FROM (SELECT {values}) missing",
                                  [value for _, _, value in added]))
    return {name: text for (name, _, _), text in zip(added, staged, strict=True) if text is not None}


def staged_extra(extra_columns: Mapping[str, str]) -> list[str]:
    """The SELECT items of a table's columns beyond the pipeline's (name -> lake type), as every
    reader stages them: as text, which the promoter casts (:mod:`pipeline.lake.validate`); a
    timestamp as an instant's text, with its offset: a naive one is wall-clock time in the
    session's zone, as ``event_timestamp`` is read (staged bare, the lake read it as UTC: five
    hours off in New York, found by the content proof); a date or time before year 1 with its era
    where DuckDB reads it."""
    return [f"{staged_text(name, kind)} AS {quote_ident(name)}" for name, kind in extra_columns.items()]


def staged_text(name: str, kind: str) -> str:
    """The text a column beyond the pipeline's is staged as (:func:`staged_extra`), ``kind`` its lake type."""
    column = quote_ident(name)
    # a value before year 1 in the spelling DuckDB reads (it took '0044-03-15 BC' as AD 44)
    if kind in ("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE"):
        # a naive time within a day of Postgres' bounds has no instant in every zone (the conversion
        # raised, and the load stopped for good): staged as it is, and set aside if DuckDB reads none
        return (rf"CASE WHEN {column} {CONVERTIBLE_WALL_TIMES} THEN regexp_replace("
                rf"{column}::timestamptz::text, '^(\S+) (.*) BC$', '\1 (BC) \2') ELSE {column}::text END")
    if kind == "DATE":
        return rf"regexp_replace({column}::text, '^(\S+) BC$', '\1 (BC)')"
    return f"{column}::text"


def decimal_types(conn: psycopg.Connection, qualified: str) -> dict[str, str]:
    """The table's ``numeric(p, s)`` columns as DuckDB decimals, exact (p up to 38, DuckDB's most); an
    unconstrained ``numeric`` stays DOUBLE, as DuckDB's own Postgres reader takes it."""
    schema, table = qualified.split(".")
    return {name: f"DECIMAL({precision}, {scale})" for name, precision, scale in conn.execute(
        "SELECT column_name, numeric_precision, numeric_scale FROM information_schema.columns WHERE "
        "table_schema = %s AND table_name = %s AND udt_name = 'numeric' AND numeric_precision <= 38 "
        # (a scale beyond the precision, or below 0, is no DuckDB decimal: the load stopped)
        "AND numeric_scale BETWEEN 0 AND numeric_precision",
        (schema, table)).fetchall()}


TIME_TYPES = ("timestamptz", "timestamp")


def arrival_column_of(source: SourceRelation, configured: str | None) -> str | None:
    """The arrival column this table is read by: ``configured`` where the table has it. The default
    (``created_at``) applies where it exists — a table without one is read by its window — while a
    column named on purpose must exist (a typo is not silently the slow path)."""
    if configured is None:
        return None
    if configured == DEFAULT_ARRIVAL_COLUMN and source.types.get(configured) not in TIME_TYPES:
        return None  # (a created_at of another type is refused as the column it is: check_shape)
    if source.types.get(configured) not in TIME_TYPES:
        found = f"is {source.types[configured]}" if configured in source.types else "does not exist"
        raise ConfigError(
            f"SOURCE_ARRIVAL_COLUMN {configured!r}: the column {source.qualified}.{configured} {found}, "
            "not a timestamp. Nothing was read, staged or created.",
            "Name a timestamp column the database sets when a row is written (e.g. created_at "
            "timestamptz DEFAULT now()), or set SOURCE_ARRIVAL_COLUMN=none to read the whole look-back.")
    return configured


def check_shape(conn: psycopg.Connection, source: SourceRelation,
                contract: SchemaChanges = SchemaChanges.EVOLVE,
                arrival_column: str | None = None, followed: Collection[str] = ()) -> dict[str, str]:
    """Raise for a missing or retyped column (the id and time columns, and a named arrival
    column); return the table's columns beyond the id, the time and the optional ones
    (:data:`pipeline.columns.OPTIONAL`), with their lake types: they are loaded too, unless the
    table's ``contract`` is discard_value: then only those the lake follows already (``followed``,
    by their identity: a column renamed since keeps its values) are, the added ones logged."""
    qualified, columns = source.qualified, source.types
    arrival_column_of(source, arrival_column)
    where = "SOURCE_TABLES" if (source.id_column, source.time_column) != (ID, TIME) else "SOURCE_TABLE"
    missing = [name for name in (source.id_column, source.time_column) if name not in columns]
    if missing:
        raise TerminalError(
            f"The source table {qualified} has no column {', '.join(missing)} (it has: "
            f"{', '.join(columns)}). Nothing was read, staged or created.",
            f"The pipeline names a row by {source.id_column} and dates it by {source.time_column}. Restore "
            f"the column, name the table's own in {where} (schema.table:time_column:id_column), or point "
            f"{where} at a view that provides it; then run again — nothing is lost meanwhile.")
    for name in (source.time_column, "created_at"):
        if name in columns and columns[name] not in TIME_TYPES:
            raise TerminalError(
                f"The source column {qualified}.{name} is {columns[name]}, not a timestamp. Nothing was "
                "read, staged or created.",
                f"Make {name} timestamptz (or timestamp, read as UTC), or point {where} at a view that casts "
                "it; then run again.")
    if columns[source.id_column] not in ID_TYPES:
        raise TerminalError(
            f"The source column {qualified}.{source.id_column} is {columns[source.id_column]}: the pipeline "
            "names every row by a key that is a uuid, text spelling one, or an integer (smallint, integer, "
            "bigint). Nothing was read, staged or created.",
            f"Name such a column as the table's id in {where} (schema.table:time_column:id_column), or "
            f"point {where} at a view that provides one; then run again.")
    folded: dict[str, list[str]] = {}
    for name in columns:
        folded.setdefault(name.lower(), []).append(name)
    if clashes := [names for names in folded.values() if len(names) > 1]:
        raise TerminalError(
            f"The source table {qualified} has columns whose names differ only in case ("
            + "; ".join(" and ".join(names) for names in clashes) + "): the lake compares column names "
            "without case, so they would be one column. Nothing was read, staged or created.",
            f"Rename one of each in the source, or point {where} at a view that names them apart.")
    for name, own in ((ID, source.id_column), (TIME, source.time_column)):
        if own != name and name in columns:
            raise TerminalError(
                f"The source table {qualified} has a column {name} besides its {own}, which the pipeline "
                f"reads as {name}. Nothing was read, staged or created.",
                f"Name {name} as the table's column in {where}, or point it at a view without the other.")
    core = {source.id_column, source.time_column, *OPTIONAL}
    extra_columns = {name: lake_type(udt) for name, udt in columns.items() if name not in core}
    exact = decimal_types(conn, qualified)
    extra_columns.update({name: kind for name, kind in exact.items() if name in extra_columns})
    if contract is SchemaChanges.DISCARD_VALUE:
        added = [name for name in extra_columns if name not in followed]
        if added:
            log.warning("source columns %s are not loaded (SCHEMA_CHANGES=discard_value)", ", ".join(added))
        return {name: kind for name, kind in extra_columns.items() if name in followed}
    return extra_columns


def own_table_columns(source: SourceRelation, extra_columns: Mapping[str, str]) -> dict[str, str] | None:
    """A table with its own id and time columns, as its lake table is made: every column the lake
    takes, besides the id, with its lake type (``extra_columns``: :func:`check_shape`'s); None for
    a table of the events shape: the lake makes that one from ``sql/lake_events.sql``."""
    if (source.id_column, source.time_column) == (ID, TIME):
        return None
    present = {name: kind for name, kind in OPTIONAL_LAKE_TYPES.items() if name not in source.absent}
    # an integer or text key keeps its type (a UUID key, the lake's id type: UUID, or text in a JDBC
    # zero-copy lake)
    key = IdKind.of_source(source.types.get(source.id_column), source.id_column)
    own_key = {source.id_column: key.lake_type} if key in (IdKind.INTEGER, IdKind.TEXT) else {}
    return {**own_key, source.time_column: "TIMESTAMPTZ", **present, **extra_columns}
