"""Which lake is attached and what it holds: its identity and its tables (reads only; the
schema and the data folder's ownership both build on these)."""

from __future__ import annotations

from pipeline.lake.session import Lake, LakeTable
from pipeline.lake.transaction import read_memo
from pipeline.sqltext import one_row, quote_ident, quote_literal


def table_names(lake: Lake) -> set[tuple[str, str]]:
    """Every ``(schema, table)`` the attached lake holds (read once in a :func:`.one_read`)."""
    memo = read_memo(lake)
    if memo is not None and isinstance(found := memo.get("table_names"), frozenset):
        return set(found)
    # literals, not parameters, in the catalog's hottest reads: on a connection with DuckLake
    # attached a statement with parameters costs 15-35 % more (docs/performance.md)
    names = {(schema, table) for schema, table in lake.execute(
        "SELECT schema_name, table_name FROM duckdb_tables() "
        f"WHERE database_name = {quote_literal(lake.name)}").fetchall()}
    if memo is not None:
        memo["table_names"] = frozenset(names)
    return names


def events_column_types(table: LakeTable) -> dict[str, str]:
    """The events table's columns and their types as the lake holds them."""
    return dict(table.lake.execute(
        "SELECT column_name, data_type FROM duckdb_columns() "
        f"WHERE database_name = {quote_literal(table.lake.name)} AND schema_name = 'main' "
        f"AND table_name = {quote_literal(table.name)}").fetchall())


def lake_id(lake: Lake) -> str:
    """This lake's identity (made with its tables; see ``lake_identity`` in lake_events.sql)."""
    table = f"{quote_ident(lake.name)}.{quote_ident(lake.ops_schema)}.lake_identity"
    return one_row(lake.execute(f"SELECT lake_id FROM {table} ORDER BY created_at, lake_id LIMIT 1"))[0]
