"""Which lake is attached and what it holds: its identity and its tables (reads only; the
schema and the data folder's ownership both build on these)."""

from __future__ import annotations

from pipeline.lake.session import Lake, LakeTable
from pipeline.lake.transaction import read_memo
from pipeline.sqltext import one_row, quote_ident


def table_names(lake: Lake) -> set[tuple[str, str]]:
    """Every ``(schema, table)`` the attached lake holds (read once in a :func:`.one_read`)."""
    memo = read_memo(lake)
    if memo is not None and isinstance(found := memo.get("table_names"), frozenset):
        return set(found)
    names = {(schema, table) for schema, table in lake.execute(
        "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = ?",
        [lake.name]).fetchall()}
    if memo is not None:
        memo["table_names"] = frozenset(names)
    return names


def events_column_types(table: LakeTable) -> dict[str, str]:
    """The events table's columns and their types as the lake holds them."""
    return dict(table.lake.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = ? "
        "AND schema_name = 'main' AND table_name = ?", [table.lake.name, table.name]).fetchall())


def lake_id(lake: Lake) -> str:
    """This lake's identity (made with its tables; see ``lake_identity`` in lake_events.sql)."""
    table = f"{quote_ident(lake.name)}.{quote_ident(lake.ops_schema)}.lake_identity"
    return one_row(lake.execute(f"SELECT lake_id FROM {table} ORDER BY created_at, lake_id LIMIT 1"))[0]
