"""Serve the seed's JSON form from typed payload columns: ``details->>'user_id' = 'user_1234'`` in a
read-only query's WHERE clause reads the column ``details_user_id`` (:mod:`pipeline.lake.payload_fields`)
when the table types that key and every row of it holds the column at the snapshot the query reads.

The column holds exactly ``details->>'key'`` (DuckDB's own operator, computed by every writer), so
the rows are the same either way; only the work differs (a column with statistics instead of every
row's JSON). At a snapshot before the key was typed, the query is left as written.

The rewrite is deliberately narrow, so that it is exact by construction: one SELECT over one lake
table (no join, no common table expression), only ``->>`` on that table's ``details`` with a
constant key, only in the WHERE clause (the result's column names stay the user's), and never
inside a subquery or a lambda (whose ``details`` may be another table's, or the lambda's own
parameter). Everything else runs as written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from pipeline.lake.payload_fields import DETAILS, TYPED_KEYS, TypedKey, complete_at, read_typed_keys
from pipeline.settings.model import PAYLOAD_KEY
from pipeline.sqltext import quote_ident, quote_literal

SqlTree = dict[str, Any]  # json_serialize_sql's output: DuckDB's own parse tree, as JSON
Params = Mapping[str, object] | Sequence[object] | None  # the values a query's parameters take


@dataclass(frozen=True)
class TableRead:
    """The one lake table a SELECT reads: its name in the lake, the alias the query gives it, and
    the snapshot it names with AT (None: the session's)."""

    table: str
    alias: str
    at: tuple[str, object] | None


def one_lake_table(node: SqlTree, lake: str) -> TableRead | None:
    """The lake table a plain SELECT reads, when it reads exactly one and nothing else."""
    if node.get("type") != "SELECT_NODE" or node.get("cte_map", {}).get("map"):
        return None
    source = node.get("from_table") or {}
    if source.get("type") != "BASE_TABLE":
        return None
    catalog, schema = (source.get("catalog_name") or "").lower(), (source.get("schema_name") or "").lower()
    lake = lake.lower()
    # lake.events, lake.main.events, main.events, events (the lake is the session's default catalog)
    if not ((catalog == "" and schema in ("", "main", lake)) or (catalog == lake and schema in ("", "main"))):
        return None
    at = source.get("at_clause")
    when: tuple[str, object] | None = None
    if at:
        expr = at.get("expr") or {}
        if expr.get("class") == "PARAMETER":  # AT (VERSION => $version): its value comes with the query
            when = (str(at.get("unit", "")).upper(), Parameter(str(expr.get("identifier", ""))))
        elif expr.get("class") == "CONSTANT" and not (expr.get("value") or {}).get("is_null", True):
            when = (str(at.get("unit", "")).upper(), expr["value"]["value"])
        else:
            return None
    return TableRead(source["table_name"], source.get("alias") or "", when)


@dataclass(frozen=True)
class Parameter:
    """A query parameter an AT clause names: ``$name``, or ``$1``/``?`` by position (from 1)."""

    identifier: str

    def value(self, params: Params) -> object | None:
        if isinstance(params, Mapping):
            return params.get(self.identifier)
        if params is not None and self.identifier.isdigit() and 0 < int(self.identifier) <= len(params):
            return params[int(self.identifier) - 1]
        return None


def snapshot_of(con: duckdb.DuckDBPyConnection, lake: str, read: TableRead,
                params: Params = None) -> int | None:
    """The snapshot id ``read`` reads: its AT clause's (a parameter's value from ``params``), else
    the session's (None: not known)."""
    if read.at is None:
        row = con.execute(f"FROM {quote_ident(lake)}.current_snapshot()").fetchone()
        return int(row[0]) if row and row[0] is not None else None
    unit, value = read.at
    if isinstance(value, Parameter):
        value = value.value(params)
        if value is None:
            return None
    if unit == "VERSION":
        return int(str(value)) if str(value).lstrip("-").isdigit() else None
    if unit == "TIMESTAMP":
        try:
            at = quote_literal(str(value))
            row = con.execute(f"SELECT max(snapshot_id) FROM {quote_ident(lake)}.snapshots() "
                              f"WHERE snapshot_time <= CAST({at} AS TIMESTAMPTZ)").fetchone()
        except duckdb.Error:
            return None
        return int(row[0]) if row and row[0] is not None else None
    return None


def _payload_key(node: SqlTree, alias: str, table: str) -> str | None:
    """The key of ``<table>.details ->> 'key'`` (or ``details ->> 'key'``), else None."""
    if node.get("class") != "FUNCTION" or node.get("function_name") != "->>" \
            or len(node.get("children", [])) != 2:
        return None
    column, key = node["children"]
    if column.get("class") != "COLUMN_REF" or key.get("class") != "CONSTANT":
        return None
    names = [str(n).lower() for n in column.get("column_names", [])]
    qualifier = (alias or table).lower()  # the one name the table goes by in the query
    if names not in ([DETAILS], [qualifier, DETAILS]):
        return None
    value = key.get("value") or {}
    if (value.get("type") or {}).get("id") != "VARCHAR" or value.get("is_null", True):
        return None
    text = str(value.get("value"))
    return text if PAYLOAD_KEY.match(text) else None


def _asks_payload(node: SqlTree, read: TableRead) -> bool:
    """Whether the WHERE clause of ``node`` (the query reading ``read``) filters on a payload key."""
    where = node.get("where_clause")
    if not isinstance(where, dict):
        return False
    return _payload_key(where, read.alias, read.table) is not None or any(
        isinstance(child := holder[at], dict) and _payload_key(child, read.alias, read.table) is not None
        for holder, at in _walk(where))


def _walk(node: Any) -> Iterator[tuple[Any, object]]:
    """Every (container, index or key) of ``node``'s expressions, not entering subqueries or lambdas
    (each binds names of its own: ``lambda details: details->>'k'`` is not the table's details)."""
    if isinstance(node, dict):
        if node.get("class") in ("SUBQUERY", "LAMBDA"):
            return
        for name, child in node.items():
            if isinstance(child, (dict, list)):
                yield node, name
                yield from _walk(child)
    elif isinstance(node, list):
        for i, child in enumerate(node):
            if isinstance(child, (dict, list)):
                yield node, i
                yield from _walk(child)


def rewrite(tree: SqlTree, lake: str, keys: dict[str, list[TypedKey]],
            snapshot: int) -> tuple[SqlTree, list[str]] | None:
    """``tree`` with each complete typed key's ``details->>'key'`` in its WHERE clause read from the
    key's column, and the keys so served; None when nothing is served."""
    statements = tree.get("statements") or []
    if len(statements) != 1:
        return None
    node = statements[0].get("node") or {}
    read = one_lake_table(node, lake)
    if read is None or node.get("where_clause") is None:
        return None
    typed = {key.key: key for key in keys.get(read.table.lower(), []) if complete_at(key, snapshot)}
    if not typed:
        return None
    served: list[str] = []
    tree = json.loads(json.dumps(tree))  # a copy: the caller's tree stays as parsed
    where = tree["statements"][0]["node"]
    for holder, at in [(where, "where_clause"), *_walk(where["where_clause"])]:
        child = holder[at]
        if not isinstance(child, dict):
            continue
        key = _payload_key(child, read.alias, read.table)
        if key is None or key not in typed:
            continue
        prefix = [n for n in child["children"][0]["column_names"][:-1]]
        holder[at] = {"class": "COLUMN_REF", "type": "COLUMN_REF", "alias": child.get("alias", ""),
                      "query_location": child.get("query_location"),
                      "column_names": [*prefix, typed[key].column]}
        served.append(key)
    return (tree, served) if served else None


def served_query(con: duckdb.DuckDBPyConnection, tree: SqlTree, lake: str,
                 params: Params = None) -> tuple[str, list[str]] | None:
    """The query ``tree`` as it runs with typed payload columns serving its JSON filters (and the keys so
    served), or None to run it as written."""
    statements = tree.get("statements") or []
    if len(statements) != 1:
        return None
    node = statements[0].get("node") or {}
    read = one_lake_table(node, lake)
    if read is None or not _asks_payload(node, read):
        return None  # nothing to serve: no reads of the lake's catalog (66 ms a statement, measured)
    # literals, not parameters: DuckDB's binding of a Python parameter imports pandas (0.9 s of a
    # --sql session's 1.3 s start, measured)
    [[ops]] = con.execute("SELECT coalesce(min(schema_name), '') FROM duckdb_tables() WHERE database_name = "
                          f"{quote_literal(lake)} AND table_name = {quote_literal(TYPED_KEYS)}").fetchall()
    if not ops:
        return None  # a lake made before typed keys
    keys = read_typed_keys(con, lake, str(ops))
    if not keys.get(read.table.lower()):
        return None
    snapshot = snapshot_of(con, lake, read, params)
    if snapshot is None:
        return None
    done = rewrite(tree, lake, keys, snapshot)
    if done is None:
        return None
    new_tree, served = done
    [[text]] = con.execute(f"SELECT json_deserialize_sql({quote_literal(json.dumps(new_tree))})").fetchall()
    return str(text), served
