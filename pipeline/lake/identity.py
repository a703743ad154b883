"""Which lake is attached and what it holds: its identity and its tables (reads only; the
schema and the data folder's ownership both build on these)."""

from __future__ import annotations

import duckdb

from pipeline.settings import Settings
from pipeline.sqltext import one_row, quote_ident


def table_names(con: duckdb.DuckDBPyConnection, settings: Settings) -> set[tuple[str, str]]:
    """Every ``(schema, table)`` the attached lake holds."""
    return {(schema, table) for schema, table in con.execute(
        "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = ?",
        [settings.lake_name]).fetchall()}


def lake_id(con: duckdb.DuckDBPyConnection, settings: Settings) -> str:
    """This lake's identity (made with its tables; see ``lake_identity`` in lake_events.sql)."""
    table = f"{quote_ident(settings.lake_name)}.{quote_ident(settings.ops_schema)}.lake_identity"
    return one_row(con.execute(f"SELECT lake_id FROM {table} ORDER BY created_at, lake_id LIMIT 1"))[0]
