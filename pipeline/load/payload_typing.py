"""Type payload keys (TYPED_KEYS; :mod:`pipeline.lake.payload_fields` says what a typed key is):
decide which from a sample of the source when a table is made (auto), or add the keys the setting
names, each added and its rows filled in one commit of the table."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

import psycopg

from pipeline.lake import payload_fields
from pipeline.lake.payload_fields import (
    DETAILS,
    SAMPLE_ROWS,
    TOKEN,
    TYPED_KEYS,
    KeyShare,
    column_of,
    typed_keys,
    value_sql,
)
from pipeline.lake.schema import events_column_types
from pipeline.lake.session import LakeTable
from pipeline.promote.commit import LakeCommit
from pipeline.settings import ResolvedSettings, TableSpec
from pipeline.source import shape
from pipeline.source.connect import connect
from pipeline.sqltext import one_row, quote_ident, quote_qualified

log = logging.getLogger(__name__)


def type_payload_keys(settings: ResolvedSettings, tables: Sequence[tuple[TableSpec, LakeTable]]) -> None:
    """Before a load plans: type what TYPED_KEYS asks of each table with a ``details`` column. auto:
    the hot keys of the source's sample, for a table that holds no row yet (once it holds rows, a
    new hot key is reported as drift, not typed: typing it fills every row); a list: each key named
    the table does not type yet."""
    if settings.typed_keys == ():
        return
    pending = [(spec, lake) for spec, lake in tables if payload_fields.DETAILS in events_column_types(lake)]
    if settings.typed_keys is None:
        pending = [(spec, lake) for spec, lake in pending if not _holds_rows(lake)]
    else:
        named = {key.lower() for key in settings.typed_keys}
        pending = [(spec, lake) for spec, lake in pending
                   if named - {key.key.lower() for key in typed_keys(lake)}]
    if not pending:
        return
    with connect(settings.source_dsn) as conn:
        for spec, lake in pending:
            shares = sample_keys(conn, shape.SourceRelation.of(conn, spec).qualified)
            if settings.typed_keys is None:
                keys = payload_fields.hot_keys(shares)
            else:
                seen = {share.key: share for share in shares}
                keys = [seen.get(key, KeyShare(key, 0.0, "string")) for key in settings.typed_keys]
            if keys:
                type_keys(lake, keys)


def _holds_rows(lake: LakeTable) -> bool:
    return bool(one_row(lake.execute(f"SELECT count(*) FROM (SELECT 1 FROM {lake.rows} LIMIT 1)"))[0])


def sample_keys(source: psycopg.Connection, qualified: str, details: str = DETAILS) -> list[KeyShare]:
    """The payload keys of a page sample of the source table ``qualified`` (schema.table), most
    frequent first, each with its share of the sampled rows and its most common JSON type; [] when
    the payload is not JSON objects (or the relation cannot be sampled: a view)."""
    column, relation = quote_ident(details), quote_qualified(qualified)
    estimate = one_row(source.execute("SELECT greatest(1, reltuples) FROM pg_class WHERE oid = %s::regclass",
                                      (relation,)))[0]
    percent = min(100.0, max(0.01, 100.0 * SAMPLE_ROWS / float(estimate)))
    # a page sample when the table is large (reading 20k rows of a 100M-row table whole would be a
    # scan); a small table is read whole, LIMIT bounding it
    query = f"""
        WITH sampled AS (
            SELECT {column}::jsonb AS payload FROM {relation}
            TABLESAMPLE SYSTEM (%(percent)s)
            WHERE jsonb_typeof({column}::jsonb) = 'object' LIMIT %(rows)s)
        SELECT e.key, count(*)::float / (SELECT count(*) FROM sampled),
               mode() WITHIN GROUP (ORDER BY jsonb_typeof(e.value))
        FROM sampled, jsonb_each(sampled.payload) e GROUP BY e.key ORDER BY 2 DESC, 1"""
    try:
        with source.transaction():
            rows = source.execute(query, {"rows": SAMPLE_ROWS, "percent": percent}).fetchall()
    except psycopg.Error as exc:  # details not JSON (a text column of anything): nothing typed
        log.info("payload keys of %s not sampled: %s", relation, str(exc).splitlines()[0])
        return []
    return [KeyShare(str(key), float(share), str(kind)) for key, share, kind in rows]


def type_keys(lake: LakeTable, keys: Sequence[KeyShare]) -> int | None:
    """Add a column per key the table does not type yet, fill the rows it holds, and record each
    key, in one commit under the table's promote lock (a load in another process waits, and a
    batch it staged for the old columns is promoted by copy, which fills them); the snapshot made
    (None: nothing to type)."""
    from pipeline.lake.schema import events_column_types

    with LakeCommit([lake]) as commit:
        payload_fields.record_snapshots(lake)
        have = {key.key.lower() for key in typed_keys(lake)}
        columns = {name.lower() for name in events_column_types(lake)}
        new = []
        for key in keys:
            if key.key.lower() in have:
                continue
            if column_of(key.key).lower() in columns:
                log.warning("payload key %s of %s not typed: the table has a column %s already",
                            key.key, lake.table, column_of(key.key))
                continue
            new.append(key)
        if not new:
            return None
        rows = one_row(lake.execute(f"SELECT count(*) FROM {lake.rows}"))[0]
        names = ", ".join(key.key for key in new)
        token = uuid.uuid4().hex
        with commit.transaction(f"type payload key(s) {names} of {lake.table}",
                                {TOKEN: token, "typed_keys": [key.key for key in new], "rows_filled": rows}):
            for key in new:
                lake.execute(f"ALTER TABLE {lake.events_table} ADD COLUMN {quote_ident(column_of(key.key))} "
                             "VARCHAR")
            if rows:
                lake.execute(f"UPDATE {lake.events_table} SET " + ", ".join(
                    f"{quote_ident(column_of(key.key))} = {value_sql(key.key)}" for key in new))
            for key in new:
                lake.execute(f"INSERT INTO {lake.ops(TYPED_KEYS)} VALUES (?, ?, ?, ?, ?, NULL, now())",
                             [lake.table, key.key, column_of(key.key), key.json_type, token])
        snapshot = commit.snapshot_id
        payload_fields.record_snapshots(lake)
    log.info("typed payload key(s) %s of %s as column(s) %s (%s row(s) filled), snapshot %s", names,
             lake.table, ", ".join(column_of(key.key) for key in new), f"{rows:,}", snapshot)
    return snapshot


