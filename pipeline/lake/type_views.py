"""A view per event type with its payload keys as columns (``lake.<table>_by_type.<event_type>``), as
Segment and Hightouch give a table per event: ``SELECT user_id, amount FROM events_by_type.purchase``.

A view's columns are the type's event id, time and arrival, then each key found in at least
:data:`KEY_SHARE` of that type's latest rows (the text ``details->>'key'`` gives; from the typed
column where the key is typed, the same text with its statistics), then ``details`` whole. Which
keys is read from the lake's newest hour of rows (at most :data:`SAMPLE_ROWS` of them, through the
time column's statistics: milliseconds on any size), and a view changes only by gaining columns: a
key once in a type's view stays in it, a type that stops arriving keeps its view, so a query
written against a view keeps working. A new table's views are
made with it, in its first commit, from the same source sample that decides its typed keys
(:mod:`pipeline.load.payload_typing`); later ones at the start of a load, in a commit of their own
only when a type or a key is new — never after a load's commit, which stays a run's last snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

import duckdb

from pipeline.columns import EVENT_COLUMNS
from pipeline.lake.identity import events_column_types
from pipeline.lake.payload_fields import DETAILS, newest_payloads_sql, typed_keys
from pipeline.lake.session import LakeTable
from pipeline.lake.transaction import transaction
from pipeline.sqltext import quote_ident, quote_literal

log = logging.getLogger(__name__)

KEY_SHARE = 0.05  # a key in at least this share of a type's sampled rows is a column of its view
MAX_KEYS = 64  # columns per view, beyond which the rest stay in details
SAMPLE_ROWS = 50_000
EVENT_TYPE = "event_type"


def schema_of(table: LakeTable) -> str:
    return f"{table.name}_by_type"


def _schema(table: LakeTable) -> str:
    return f"{quote_ident(table.lake.name)}.{quote_ident(schema_of(table))}"


def recent_keys(table: LakeTable, sample_rows: int = SAMPLE_ROWS) -> dict[str, list[str]]:
    """Each event type of the table's newest hour of rows, the most frequent first -> its keys in at
    least :data:`KEY_SHARE` of its rows there, the most frequent first (then by name)."""
    rows = table.lake.execute(f"""
        WITH recent AS ({newest_payloads_sql(table, sample_rows, with_type=True)}),
             sizes AS (SELECT event_type, count(*) AS rows FROM recent GROUP BY event_type),
             keyed AS (SELECT event_type, unnest(json_keys(payload)) AS key FROM recent)
        SELECT event_type, key FROM keyed JOIN sizes USING (event_type) GROUP BY event_type, key, rows
        HAVING count(*) >= {KEY_SHARE} * rows ORDER BY rows DESC, event_type, count(*) DESC, key""")
    return keys_by_type(rows.fetchall())


def keys_by_type(rows: Iterable[tuple[object, ...]]) -> dict[str, list[str]]:
    """``(event type, key)`` rows, in the order wanted, as each type -> its keys."""
    found: dict[str, list[str]] = {}
    for kind, key in rows:
        found.setdefault(str(kind), []).append(str(key))
    return found


def _existing(table: LakeTable) -> dict[str, tuple[list[str], str]]:
    """Each view of the table's ``_by_type`` schema (by name, lower case) -> its columns and SQL."""
    views = dict(table.lake.execute("SELECT lower(view_name), sql FROM duckdb_views() "
                                    "WHERE database_name = ? AND schema_name = ?",
                                    [table.lake.name, schema_of(table)]).fetchall())
    columns: dict[str, list[str]] = {}
    for view, column in table.lake.execute(
            "SELECT lower(table_name), column_name FROM duckdb_columns() WHERE database_name = ? "
            "AND schema_name = ? ORDER BY table_name, column_index",
            [table.lake.name, schema_of(table)]).fetchall():
        columns.setdefault(str(view), []).append(str(column))
    return {name: (columns.get(name, []), str(sql)) for name, sql in views.items()}


def _base(table: LakeTable, have: Iterable[str]) -> list[str]:
    """The table's columns a view starts with (its id, time and arrival, those the table has)."""
    columns = set(have)
    return [table.own(name) for name in EVENT_COLUMNS if name not in (DETAILS, EVENT_TYPE)
            and table.own(name) in columns]


def _own_columns(table: LakeTable, have: Iterable[str]) -> set[str]:
    """The view columns that are not keys (lower case): its base columns and details."""
    return {name.lower() for name in [*_base(table, have), table.own(DETAILS)]}


def _view_sql(table: LakeTable, kind: str, keys: Sequence[str], typed: Mapping[str, str],
              have: Iterable[str]) -> str:
    base = _base(table, have)
    taken = _own_columns(table, have)
    items = [quote_ident(name) for name in base]
    for key in keys:
        if key.lower() in taken:  # a key named as a base column, or a case twin of a key before it
            continue
        taken.add(key.lower())
        value = (quote_ident(typed[key]) if key in typed
                 else f"{quote_ident(table.own(DETAILS))}->>{quote_literal(key)}")
        items.append(f"{value} AS {quote_ident(key)}")
    items.append(quote_ident(table.own(DETAILS)))
    return (f"CREATE OR REPLACE VIEW {_schema(table)}.{quote_ident(kind)} "
            f"AS SELECT {', '.join(items)} FROM main.{quote_ident(table.name)} "
            f"WHERE {quote_ident(table.own(EVENT_TYPE))} = {quote_literal(kind)}")


def _nameable(name: str) -> bool:
    """Can ``name`` be an identifier (DuckDB refuses an empty quoted one, and a NUL in one)?"""
    return bool(name) and "\x00" not in name


def _shows(sql: str, kind: str) -> bool:
    """Is the view of ``sql`` (as DuckDB keeps it: ``… WHERE (event_type = 'kind');``) the one of
    ``kind``, and not of a type whose name differs in case only?"""
    return sql.rstrip().endswith(f"= {quote_literal(kind)});")


def has_types(table: LakeTable, have: Iterable[str]) -> bool:
    """Has a table of columns ``have`` event types and payloads to make views of?"""
    columns = set(have)
    return table.own(DETAILS) in columns and table.own(EVENT_TYPE) in columns


def statements(table: LakeTable, changes: Sequence[tuple[str, Sequence[str]]], typed: Mapping[str, str],
               have: Iterable[str]) -> list[str]:
    """Make each view of ``changes`` (type -> its keys), in the open transaction; ``typed``: each
    typed key's column, ``have``: the table's columns."""
    columns = list(have)
    return [f"CREATE SCHEMA IF NOT EXISTS {_schema(table)}",
            *(_view_sql(table, kind, keys, typed, columns) for kind, keys in changes)]


def wanted_changes(table: LakeTable, wanted: Mapping[str, Sequence[str]], have: Iterable[str],
                   existing: Mapping[str, tuple[list[str], str]]) -> list[tuple[str, list[str]]]:
    """The views to make or widen for ``wanted`` (each type, the most frequent first -> its keys)
    beside the views that exist: a new type's, and one whose keys grew."""
    changes: list[tuple[str, list[str]]] = []
    own = _own_columns(table, have)
    for kind, keys in wanted.items():  # the most frequent type first: it keeps a shared name
        view = existing.get(kind.lower())
        if not _nameable(kind):
            continue  # an empty type is queried from the table
        twin = any(k.lower() == kind.lower() for k, _ in changes)
        if twin or (view is not None and not _shows(view[1], kind)):
            # names ignore case: "Purchase" and "purchase" would share a view; the first keeps it
            log.info("event type %r of %s has no view of its own: its name is another type's",
                     kind, table.name)
            continue
        held = [c for c in (view[0] if view else []) if c.lower() not in own]
        kept = {c.lower() for c in held}
        merged = held + [key for key in keys if _nameable(key) and key.lower() not in kept]
        merged = merged[:max(MAX_KEYS, len(held))]
        if view is None or len(merged) > len(held):
            changes.append((kind, merged))
    return changes


def refresh(table: LakeTable) -> list[str]:
    """Make or widen the views the table's latest rows call for, in one commit; the types whose view
    changed. A table without ``event_type`` and ``details`` has none. A failure (another process's
    commit of the same view) is logged: the next load makes it."""
    have = events_column_types(table)
    if not has_types(table, have):
        return []
    try:
        changes = wanted_changes(table, recent_keys(table), have, _existing(table))
        if not changes:
            return []
        typed = {key.key: key.column for key in typed_keys(table)}
        with transaction(table.lake,
                         f"views by event type of {table.name}: " + ", ".join(k for k, _ in changes)):
            for statement in statements(table, changes, typed, have):
                table.lake.execute(statement)
    except duckdb.Error as exc:
        log.warning("views by event type of %s not made or widened now (the next load tries again): %s",
                    table.name, str(exc).splitlines()[0])
        return []
    log.info("views by event type of %s made or widened: %s", table.name, ", ".join(k for k, _ in changes))
    return [kind for kind, _ in changes]
