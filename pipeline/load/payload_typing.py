"""Type payload keys (TYPED_KEYS; :mod:`pipeline.lake.payload_fields` says what a typed key is):
decide which from a sample of the source as a table is made (auto: its columns made with it), or
add the keys the setting names, each added and its rows filled in one commit of the table."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import psycopg

from pipeline.lake import known_since, payload_fields, type_views
from pipeline.lake.payload_fields import (
    DETAILS,
    SAMPLE_ROWS,
    KeyShare,
    column_of,
    record_sql,
    typed_keys,
    value_sql,
)
from pipeline.lake.schema import events_column_types
from pipeline.lake.session import LakeTable
from pipeline.promote.commit import LakeCommit
from pipeline.settings import ResolvedSettings, TableSpec
from pipeline.settings.model import Promotion, Reader
from pipeline.source import shape
from pipeline.source.connect import connect
from pipeline.sqltext import one_row, quote_ident, quote_qualified

log = logging.getLogger(__name__)


def keys_of_new_table(settings: ResolvedSettings, spec: TableSpec) -> Callable[[], list[KeyShare]]:
    """What a table made now types, decided as it is made (its columns are then made with it, in
    the commit that makes it: a column added to a table in a commit of its own, once that snapshot
    is expired and inlined rows flushed, made DuckLake 1.5.5 fail reading the oldest snapshot kept)."""

    def decide() -> list[KeyShare]:
        if settings.typed_keys == ():
            return []  # no source connection for nothing
        with connect(settings.source_dsn) as conn:
            return chosen_keys(settings, conn, spec)
    return decide


def types_of_new_table(settings: ResolvedSettings, spec: TableSpec) -> Callable[[], dict[str, list[str]]]:
    """The views by event type a table made now is made with (:mod:`pipeline.lake.type_views`), from a
    page sample of its source, decided as it is made."""

    def decide() -> dict[str, list[str]]:
        with connect(settings.source_dsn) as conn:
            return sample_type_keys(conn, shape.SourceRelation.of(conn, spec).qualified)
    return decide


def chosen_keys(settings: ResolvedSettings, conn: psycopg.Connection, spec: TableSpec) -> list[KeyShare]:
    """The keys TYPED_KEYS types in ``spec``'s table: the hot keys of a sample of its source (auto),
    or the keys named, each with its JSON type in the sample (text when it was not seen)."""
    if settings.typed_keys == ():
        return []
    if settings.typed_keys is None and settings.promotion is Promotion.ZERO_COPY \
            and settings.spark.reader is Reader.JDBC:
        # Spark's own writer cannot compute the columns: typing would make every batch go by copy
        log.info("TYPED_KEYS=auto types nothing in a zero-copy lake read by SPARK_READER=jdbc (its files "
                 "would lack the columns, and every batch would be promoted by copy); name keys to type them")
        return []
    shares = sample_keys(conn, shape.SourceRelation.of(conn, spec).qualified)
    if settings.typed_keys is None:
        return payload_fields.hot_keys(shares)
    seen = {share.key: share for share in shares}
    return [seen.get(key, KeyShare(key, 0.0, "string")) for key in settings.typed_keys]


def type_payload_keys(settings: ResolvedSettings, tables: Sequence[tuple[TableSpec, LakeTable]]) -> None:
    """Before a load plans, for tables that exist: add each key TYPED_KEYS names that a table with a
    ``details`` column does not type yet (its rows filled in the same commit). auto types a table's
    keys when it is made (:func:`keys_of_new_table`), or, for a table made empty by another command
    first, before its first row; once it holds rows, a new hot key is drift, reported, not typed."""
    if settings.typed_keys == ():
        return
    pending = [(spec, lake) for spec, lake in tables if payload_fields.DETAILS in events_column_types(lake)]
    if settings.typed_keys is None:
        pending = [(spec, lake) for spec, lake in pending if not typed_keys(lake) and not _holds_rows(lake)]
    else:
        named = set(settings.typed_keys)
        pending = [(spec, lake) for spec, lake in pending if named - {key.key for key in typed_keys(lake)}]
    if not pending:
        return
    with connect(settings.source_dsn) as conn:
        for spec, lake in pending:
            if keys := chosen_keys(settings, conn, spec):
                type_keys(lake, keys)


def _holds_rows(table: LakeTable) -> bool:
    return bool(one_row(table.lake.execute(f"SELECT count(*) FROM (SELECT 1 FROM {table.rows} LIMIT 1)"))[0])


def _sample_percent(source: psycopg.Connection, relation: str) -> float:
    """The page sample's percent that holds about :data:`SAMPLE_ROWS` rows of ``relation``: a large
    table is sampled by pages (reading 20k rows of a 100M-row table whole would be a scan); a small
    one is read whole, LIMIT bounding it."""
    estimate = one_row(source.execute("SELECT greatest(1, reltuples) FROM pg_class WHERE oid = %s::regclass",
                                      (relation,)))[0]
    return min(100.0, max(0.01, 100.0 * SAMPLE_ROWS / float(estimate)))


def _sampled(source: psycopg.Connection, qualified: str, query: str) -> list[tuple[object, ...]]:
    """``query`` over ``sampled`` (a page sample's JSON-object payloads, and their event types when the
    query names them); [] when the payload is not JSON (or the relation cannot be sampled: a view)."""
    relation = quote_qualified(qualified)
    try:
        with source.transaction():
            params = {"rows": SAMPLE_ROWS, "percent": _sample_percent(source, relation)}
            return source.execute(query.format(relation=relation), params).fetchall()
    except psycopg.Error as exc:  # details not JSON (a text column of anything): nothing typed
        log.info("payload keys of %s not sampled: %s", relation, str(exc).splitlines()[0])
        return []


def sample_keys(source: psycopg.Connection, qualified: str, details: str = DETAILS) -> list[KeyShare]:
    """The payload keys of a page sample of the source table ``qualified`` (schema.table), most
    frequent first, each with its share of the sampled rows and its most common JSON type."""
    column = quote_ident(details)
    rows = _sampled(source, qualified, f"""
        WITH sampled AS (
            SELECT {column}::jsonb AS payload FROM {{relation}}
            TABLESAMPLE SYSTEM (%(percent)s)
            WHERE jsonb_typeof({column}::jsonb) = 'object' LIMIT %(rows)s)
        SELECT e.key, count(*)::float / (SELECT count(*) FROM sampled),
               mode() WITHIN GROUP (ORDER BY jsonb_typeof(e.value))
        FROM sampled, jsonb_each(sampled.payload) e GROUP BY e.key ORDER BY 2 DESC, 1""")
    return [KeyShare(str(key), float(str(share)), str(kind)) for key, share, kind in rows]


def sample_type_keys(source: psycopg.Connection, qualified: str) -> dict[str, list[str]]:
    """Each event type of a page sample of the source table, the most frequent first -> its keys in
    at least :data:`type_views.KEY_SHARE` of its sampled rows (what its view's columns start as)."""
    details, kind = quote_ident(DETAILS), quote_ident(type_views.EVENT_TYPE)
    rows = _sampled(source, qualified, f"""
        WITH sampled AS (
            SELECT {kind}::text AS kind, {details}::jsonb AS payload FROM {{relation}}
            TABLESAMPLE SYSTEM (%(percent)s)
            WHERE {kind} IS NOT NULL AND jsonb_typeof({details}::jsonb) = 'object' LIMIT %(rows)s),
             sizes AS (SELECT kind, count(*) AS n FROM sampled GROUP BY kind),
             keyed AS (SELECT kind, jsonb_object_keys(payload) AS key FROM sampled)
        SELECT kind, key FROM keyed JOIN sizes USING (kind) GROUP BY kind, key, n
        HAVING count(*) >= {type_views.KEY_SHARE} * n ORDER BY n DESC, kind, count(*) DESC, key""")
    return type_views.keys_by_type(rows)


def type_keys(table: LakeTable, keys: Sequence[KeyShare]) -> int | None:
    """Add a column per key the table does not type yet, fill the rows it holds, and record each
    key, in one commit under the table's promote lock (a load in another process waits, and a
    batch it staged for the old columns is promoted by copy, which fills them); the snapshot made
    (None: nothing to type)."""
    with LakeCommit([table]) as commit:
        columns = {name.lower() for name in events_column_types(table)}
        typed = {key.key for key in typed_keys(table)}
        new = []
        for key in keys:
            if key.key in typed:
                continue
            if column_of(key.key).lower() in columns:  # column names ignore case: User_ID is user_id's
                log.warning("payload key %s of %s not typed: the table has a column %s already (column "
                            "names ignore case); it is queried in the JSON", key.key, table.name,
                            column_of(key.key))
                continue
            new.append(key)
            columns.add(column_of(key.key).lower())
        if not new:
            return None
        rows = one_row(table.lake.execute(f"SELECT count(*) FROM {table.rows}"))[0]
        names = ", ".join(key.key for key in new)
        with commit.transaction(f"type payload key(s) {names} of {table.name}",
                                {"typed_keys": [key.key for key in new], "rows_filled": rows}):
            for key in new:
                table.lake.execute(f"ALTER TABLE {table.events_table} "
                                   f"ADD COLUMN {quote_ident(column_of(key.key))} VARCHAR")
            if rows:
                # every row written again: its first snapshot kept first (pipeline.lake.known_since)
                kept = [known_since.kept_sql()] if known_since.has_column(columns) else []
                table.lake.execute(f"UPDATE {table.events_table} SET " + ", ".join(kept + [
                    f"{quote_ident(column_of(key.key))} = {value_sql(key.key)}" for key in new]))
            for key in new:
                table.lake.execute(record_sql(table),
                                   [table.name, key.key, column_of(key.key), key.json_type])
        snapshot = commit.snapshot_id
    log.info("typed payload key(s) %s of %s as column(s) %s (%s row(s) filled), snapshot %s", names,
             table.name, ", ".join(column_of(key.key) for key in new), f"{rows:,}", snapshot)
    return snapshot
