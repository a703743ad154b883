"""Which statements a read-only ``--sql`` session may run, judged on DuckDB's own parse tree.

An allow-list, not a list of known writers: a read-only session runs queries (``SELECT``,
``FROM``-first, ``VALUES``, ``WITH``, ``DESCRIBE``/``SHOW``/``SUMMARIZE``/``PRAGMA`` reads, which
DuckDB parses as queries), ``EXPLAIN`` of such a query, transactions, ``SET VARIABLE`` to a judged
expression, and ``USE`` of the lake or one of its schemas (judged by what the name resolves to, not
by how it is spelled). Inside a query every function is looked up by name: DuckDB's built-in scalar,
aggregate and macro functions (minus the few with effects outside the query), and the table
functions named below (the lake's own read functions, series, metadata). A name that is not on the
list — ``postgres_execute``, ``query`` (SQL text no one can judge before it runs), a writer such as
``ducklake_cleanup_old_files`` — refuses the statement, and with it the whole session, before
anything runs. ``CALL``, ``PREPARE``/``EXECUTE``, ``COPY`` … are not queries.

The tree is the one :func:`json_serialize_sql` prints; this module only walks it (pure).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# table functions a query may read from: the lake's read functions, series, DuckDB's metadata and
# the Parquet readers (files are reachable only under the lake's data path: sql_session/sandbox.py)
TABLE_FUNCTIONS = frozenset({
    "range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree", "summary",
    "snapshots", "current_snapshot", "last_committed_snapshot", "table_changes", "table_insertions",
    "table_deletions", "ducklake_snapshots", "ducklake_table_info", "ducklake_table_changes",
    "ducklake_table_insertions", "ducklake_table_deletions", "ducklake_list_files",
    "ducklake_current_snapshot", "ducklake_last_committed_snapshot", "ducklake_options",
    "ducklake_settings", "duckdb_columns", "duckdb_constraints", "duckdb_databases", "duckdb_functions",
    "duckdb_indexes", "duckdb_keywords", "duckdb_schemas", "duckdb_tables", "duckdb_types",
    "duckdb_views", "duckdb_settings", "duckdb_secrets", "pg_timezone_names", "icu_calendar_names",
    "pragma_table_info", "pragma_show", "pragma_version", "pragma_platform", "pragma_collations",
    "read_parquet", "parquet_scan", "parquet_metadata", "parquet_schema", "parquet_file_metadata",
    "parquet_kv_metadata",
})
# built-in scalar functions with an effect beyond the query's result (sequences, the log, the
# process environment, which may hold the source's password)
SCALAR_EXCEPTIONS = frozenset({"nextval", "currval", "setval", "write_log", "getenv"})
# the catalog database DuckLake attaches beside the lake for its own tables (lake/connect.py)
METADATA_PREFIX = "__ducklake_metadata_"

_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^)]*\)\s*)?", re.I)
_SET_VARIABLE = re.compile(r"^\s*SET\s+VARIABLE\s+[A-Za-z_][A-Za-z0-9_]*\s*(?:=|TO)\s*(.+?)\s*;?\s*$",
                           re.I | re.S)
_CALL = re.compile(r"^\s*CALL\s+(.+?)\s*;?\s*$", re.I | re.S)
_USE = re.compile(r"^\s*USE\s+[A-Za-z_\"][\w.\"]*\s*;?\s*$", re.I)
_RESET_VARIABLE = re.compile(r"^\s*RESET\s+VARIABLE\s+[A-Za-z_][A-Za-z0-9_]*\s*;?\s*$", re.I)


@dataclass(frozen=True)
class Verdict:
    """What to do with a statement: run it as is, judge a query in its place (``query``: the
    query an EXPLAIN or SET VARIABLE wraps), or refuse it (``refused``: why)."""

    query: str | None = None
    refused: str | None = None
    use: tuple[str, ...] | None = None  # USE: the names it switches to, judged by what they resolve to


def classify(statement_type: str, text: str) -> Verdict:
    """The first look, by statement type: queries are judged on their tree, a few statements
    wrap a query, the rest are refused."""
    if statement_type == "SELECT":
        return Verdict(query=text)
    if statement_type == "TRANSACTION":
        return Verdict()
    if statement_type == "EXPLAIN":
        return Verdict(query=_EXPLAIN.sub("", text, count=1))
    if statement_type == "SET":
        if _USE.match(text):
            return Verdict(use=use_target(text))
        if _RESET_VARIABLE.match(text):
            return Verdict()
        assigned = _SET_VARIABLE.match(text)
        if assigned:
            return Verdict(query=f"SELECT {assigned.group(1)}")
        return Verdict(refused="settings are fixed in a read-only session (SET VARIABLE and USE are allowed)")
    if statement_type == "CALL":
        called = _CALL.match(text)
        if called:  # CALL f(…) is SELECT * FROM f(…): the same table function, judged by name
            return Verdict(query=f"SELECT * FROM {called.group(1)}")
        return Verdict(refused=f"{' '.join(text.split())[:40]} is a procedure, not a query")
    return Verdict(refused=f"{statement_type} is not a query")


def use_target(text: str) -> tuple[str, ...]:
    """The dotted name a ``USE`` statement names, unquoted: ``("lake",)``, ``("lake", "ops")``."""
    name = re.sub(r"^\s*USE\s+", "", text, flags=re.I).strip().rstrip(";").strip()
    return tuple(part.strip('"') for part in re.findall(r'"[^"]*"|[^.]+', name))


def use_refusal(target: tuple[str, ...], lake: str, catalogs: frozenset[str], lake_schemas: frozenset[str]
                ) -> str | None:
    """Why ``USE target`` may not run (None: it may). Only the lake and its schemas: a name resolves
    to a catalog first (``USE x`` switches to the database ``x`` when one exists), so the catalog
    database DuckLake attaches beside the lake is never made the default, where unqualified names
    would reach its tables (the catalog server's roles among them)."""
    catalog, schema = (target[0], target[1] if len(target) > 1 else None) if target else ("", None)
    lake_key = lake.lower()
    if len(target) == 1 and catalog.lower() != lake_key and catalog.lower() not in catalogs \
            and catalog.lower() in lake_schemas:
        return None  # a schema of the lake, the session's catalog
    outside = schema is not None and schema.lower() not in lake_schemas
    if catalog.lower() != lake_key or len(target) > 2 or outside:
        return (f"USE {'.'.join(target)} leaves the lake: a read-only session uses only the lake "
                f"({lake}) and its schemas")
    return None


def refusal(tree: dict[str, Any], allowed_scalars: frozenset[str]) -> str | None:
    """Why the serialized query ``tree`` (json_serialize_sql's output) may not run, or None."""
    if tree.get("error"):
        return f"DuckDB cannot judge it: {tree.get('error_message', 'not a plain query')}"
    for kind, name in _references(tree):
        if kind == "table function" and name not in TABLE_FUNCTIONS:
            return f"the table function {name}() is not one a read-only session may call"
        if kind == "function" and (name not in allowed_scalars or name in SCALAR_EXCEPTIONS):
            return f"the function {name}() is not one a read-only session may call"
        if kind == "table" and name.lower().startswith(METADATA_PREFIX):
            return (f"{name} is the lake's catalog database, which a read-only session does not read "
                    "directly; use the lake's functions (snapshots(), ducklake_table_info(…))")
    return None


def _references(node: Any) -> Iterator[tuple[str, str]]:
    """Every function (``function``/``table function``) and table catalog or schema (``table``)
    that the tree names, at any depth: subqueries, CTEs, joins, arguments."""
    if isinstance(node, dict):
        if node.get("type") == "TABLE_FUNCTION" and isinstance(node.get("function"), dict):
            function = node["function"]
            yield "table function", str(function.get("function_name", "")).lower()
            for child in function.get("children", []):
                yield from _references(child)
            for key, value in node.items():
                if key != "function":
                    yield from _references(value)
            return
        if node.get("class") == "FUNCTION" and "function_name" in node:
            yield "function", str(node["function_name"]).lower()
        if node.get("type") == "BASE_TABLE":
            for part in (node.get("catalog_name"), node.get("schema_name")):
                if part:
                    yield "table", str(part)
        for value in node.values():
            yield from _references(value)
    elif isinstance(node, list):
        for value in node:
            yield from _references(value)
