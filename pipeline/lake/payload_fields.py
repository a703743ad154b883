"""Typed payload fields: payload keys kept as columns beside ``details``, so a question about one
key (a user's journey: ``details->>'user_id' = 'user_1234'``) reads a column, with its statistics,
instead of parsing every row's JSON.

A typed column holds exactly ``details->>'key'`` (DuckDB's own operator, text) for every row
written after the key was typed, by every writer: copy promotion computes it in its INSERT, the
arrow reader's slice tasks with DuckDB on the rows they write (:mod:`pipeline.extract.slice_task`).
So it equals what the seed's query computes, whatever the key's JSON type (a number is its text, a
key missing or JSON null is NULL), and a key changing type loses nothing: the change is reported
as drift (:func:`drift`), never refused.

Which keys: TYPED_KEYS=auto (the default) decides from the data as a table is made: the keys
present in at least :data:`HOT_SHARE` of a sample of the source's rows, with scalar values, made
as columns of the table in the commit that makes it; a list types those keys (a key named later
is added, and the rows the table holds are filled, in one commit); none types nothing new.
``ops.typed_keys`` names each key; its column's first snapshot (DuckLake's own record) is the
first at which every row holds it: the query rewrite (:mod:`pipeline.sql_session.typed_rewrite`)
serves the JSON form from the column only there and later, so a query returns the same rows at
every snapshot either way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb

from pipeline.lake.identity import events_column_types, table_names
from pipeline.lake.session import LakeTable
from pipeline.settings.model import PAYLOAD_KEY
from pipeline.sqltext import quote_ident, quote_literal

log = logging.getLogger(__name__)

TYPED_KEYS = "typed_keys"  # the ops table
DETAILS = "details"  # the payload column keys are typed from
PREFIX = "details_"  # a typed key's column: details_<key>
HOT_SHARE = 0.5  # TYPED_KEYS=auto types a key in at least this share of the sampled rows
MOST_KEYS = 8  # and at most this many (the most frequent)
SAMPLE_ROWS = 20_000  # rows of the source the decision reads (a page sample, cheap on any size)
NEVER = 2**62  # the first snapshot of a key whose column is not found: never complete
SCALARS = ("string", "number", "boolean")  # JSON types a typed column serves (objects stay JSON)


@dataclass(frozen=True)
class TypedKey:
    """A payload key of a table kept as a column, and since when every row holds it."""

    key: str
    column: str
    json_type: str
    complete_since: int  # its column's first snapshot: every row holds it there and later


@dataclass(frozen=True)
class KeyShare:
    """A payload key seen in the source's sample: its share of the rows, its JSON type there."""

    key: str
    share: float
    json_type: str


def column_of(key: str) -> str:
    return f"{PREFIX}{key}"


def value_sql(key: str, details: str = DETAILS) -> str:
    """The SQL of a typed key's value: the seed's own ``details->>'key'``."""
    return f"({details} ->> {quote_literal(key)})"


def typed_keys(table: LakeTable) -> list[TypedKey]:
    """The table's typed keys, oldest first ([] in a lake made before typed keys)."""
    if (table.lake.ops_schema, TYPED_KEYS) not in table_names(table.lake):
        return []
    keys = read_typed_keys(table.lake.con, table.lake.name, table.lake.ops_schema, table.name)
    return keys.get(table.name.lower(), [])


def read_typed_keys(con: duckdb.DuckDBPyConnection, lake: str, ops_schema: str,
                    table: str | None = None) -> dict[str, list[TypedKey]]:
    """Each table's typed keys (lower-cased table name -> keys, oldest first), of ``table`` alone
    if given. A key is complete from its column's first snapshot, as DuckLake's own catalog records
    it (``ducklake_column.begin_snapshot``: it survives the expiry of that snapshot); a key whose
    column is not found (dropped by hand) is never complete: queries read the JSON."""
    [[metadata]] = con.execute("SELECT getvariable('lake_metadata')").fetchall()
    # a literal: a Python parameter's binding imports pandas (a --sql session's start reads this)
    where = f"WHERE k.table_name = {quote_literal(table)}" if table is not None else ""
    rows = con.execute(
        f"""SELECT k.table_name, k.payload_key, k.column_name, k.json_type, c.begin_snapshot
            FROM {quote_ident(lake)}.{quote_ident(ops_schema)}.{TYPED_KEYS} k
            LEFT JOIN (SELECT t.table_name, c.column_name, min(c.begin_snapshot) AS begin_snapshot
                       FROM {metadata}.ducklake_column c
                       JOIN {metadata}.ducklake_table t ON t.table_id = c.table_id AND t.end_snapshot IS NULL
                       JOIN {metadata}.ducklake_schema s ON s.schema_id = t.schema_id
                            AND s.end_snapshot IS NULL AND s.schema_name = 'main'
                       WHERE c.end_snapshot IS NULL AND c.parent_column IS NULL
                       GROUP BY ALL) c
                   ON lower(c.table_name) = lower(k.table_name)
                  AND lower(c.column_name) = lower(k.column_name)
            {where} ORDER BY 5 NULLS LAST, k.payload_key""").fetchall()
    found: dict[str, list[TypedKey]] = {}
    for name, key, column, kind, since in rows:
        found.setdefault(str(name).lower(), []).append(
            TypedKey(key, column, kind, NEVER if since is None else int(since)))
    return found


def record_sql(table: LakeTable) -> str:
    """The INSERT of a typed key's row (parameters: table, key, column, JSON type)."""
    return f"INSERT INTO {table.lake.ops(TYPED_KEYS)} VALUES (?, ?, ?, ?, now())"


def created_columns(keys: Sequence[KeyShare]) -> str:
    """The typed columns of a table made with its keys typed (after its own columns in CREATE TABLE)."""
    return "".join(f",\n    {quote_ident(column_of(key.key))} VARCHAR" for key in keys)


def columns_sql(keys: Sequence[TypedKey], details: str = DETAILS) -> list[tuple[str, str]]:
    """(column, value SQL) of each typed key, for an INSERT of rows whose payload is ``details``."""
    return [(quote_ident(key.column), value_sql(key.key, details)) for key in keys]


def hot_keys(shares: Sequence[KeyShare]) -> list[KeyShare]:
    """The keys TYPED_KEYS=auto types: scalar, in at least :data:`HOT_SHARE` of the rows, named as a
    column can be; the :data:`MOST_KEYS` most frequent."""
    taken: set[str] = set()
    hot = []
    for share in shares:
        if share.share >= HOT_SHARE and share.json_type in SCALARS and PAYLOAD_KEY.match(share.key) \
                and share.key.lower() not in taken:
            hot.append(share)
            taken.add(share.key.lower())
    return hot[:MOST_KEYS]


def complete_at(key: TypedKey, snapshot: int) -> bool:
    """Does every row of the table at ``snapshot`` hold the key's column?"""
    return snapshot >= key.complete_since


@dataclass(frozen=True)
class Drift:
    """A payload key whose recent rows differ from what was typed: a typed key now of another JSON
    type, or a hot key not typed."""

    table: str
    key: str
    words: str


def newest_payloads_sql(table: LakeTable, rows: int, *, with_type: bool = False) -> str:
    """The payload objects (``payload``) of the table's newest hour of rows, at most ``rows`` of them,
    read through the time column's statistics (cheap on any size); with each row's ``event_type``
    (rows without one left out) when ``with_type``: what drift and the views by type look at."""
    details = quote_ident(DETAILS)
    kind = "event_type, " if with_type else ""
    typed_only = "event_type IS NOT NULL AND " if with_type else ""
    return (f"SELECT {kind}{details}::JSON AS payload FROM {table.rows} "
            f"WHERE {typed_only}json_type({details}::JSON) = 'OBJECT' "
            f"AND event_timestamp >= (SELECT max(event_timestamp) FROM {table.rows}) - INTERVAL 1 HOUR "
            f"LIMIT {int(rows)}")


def drift(table: LakeTable, recent_rows: int = SAMPLE_ROWS) -> list[Drift]:
    """What the table's latest rows (its newest hour of events, at most ``recent_rows``: read through
    the time column's statistics, cheap on any size) say about its typed keys: a typed key whose values
    are now mostly of another JSON type (its column still holds their text: nothing is lost), and a
    key in at least :data:`HOT_SHARE` of them that is not typed. [] for a table without details."""
    if DETAILS not in events_column_types(table):
        return []
    typed = {key.key: key for key in typed_keys(table)}
    try:
        rows = table.lake.execute(f"""
            WITH recent AS ({newest_payloads_sql(table, recent_rows)}),
                 keyed AS (SELECT unnest(json_keys(payload)) AS key, payload FROM recent)
            SELECT key, count(*) / (SELECT count(*) FROM recent),
                   mode(lower(json_type(payload, '$.' || to_json(key)::VARCHAR)))
            FROM keyed GROUP BY key""").fetchall()
    except duckdb.Error as exc:
        log.info("payload drift of %s not read: %s", table.name, str(exc).splitlines()[0])
        return []
    found: list[Drift] = []
    for key, share, kind in rows:
        json_type = {"varchar": "string", "bigint": "number", "ubigint": "number", "double": "number",
                     "boolean": "boolean", "object": "object", "array": "array", "null": "null"}.get(
            str(kind), str(kind))
        if key in typed and json_type != typed[key].json_type and typed[key].json_type in SCALARS:
            found.append(Drift(table.name, key, f"typed as {typed[key].json_type}, now mostly {json_type} "
                                                f"in the latest rows (the column holds their text)"))
        elif key not in typed and share >= HOT_SHARE and json_type in SCALARS and PAYLOAD_KEY.match(str(key)):
            namesake = next((k for k in typed if k.lower() == str(key).lower()), None)
            found.append(Drift(table.name, key, f"in {100 * share:.0f}% of the latest rows, not typed " + (
                f"(its column would be {column_of(key)}, the name of {namesake}'s: column names ignore "
                "case; query it in the JSON)" if namesake else f"(TYPED_KEYS={key} adds it)")))
    return sorted(found, key=lambda d: d.key)


@dataclass(frozen=True)
class PayloadStatus:
    """A table's typed keys and what its latest rows say about them (``--status``)."""

    typed: tuple[TypedKey, ...] = ()
    drift: tuple[Drift, ...] = ()

    @staticmethod
    def of(table: LakeTable) -> PayloadStatus:
        return PayloadStatus(tuple(typed_keys(table)), tuple(drift(table)))

    @staticmethod
    def combined(parts: Sequence[PayloadStatus]) -> PayloadStatus:
        return PayloadStatus(tuple(k for p in parts for k in p.typed),
                             tuple(d for p in parts for d in p.drift))

    def as_dict(self) -> dict[str, object]:
        return {"typed_keys": [{"key": k.key, "column": k.column, "json_type": k.json_type,
                                "complete_since": None if k.complete_since == NEVER else k.complete_since}
                               for k in self.typed],
                "drift": [{"table": d.table, "key": d.key, "words": d.words} for d in self.drift]}

    def describe(self) -> str:
        typed = ", ".join(f"{k.key} ({k.column}, every row since snapshot "
                          f"{'?' if k.complete_since == NEVER else k.complete_since})" for k in self.typed)
        drift = "; ".join(f"{d.table}.details.{d.key}: {d.words}" for d in self.drift)
        return (typed or "none") + (f"; DRIFT: {drift}" if drift else "")
