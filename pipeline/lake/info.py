"""``catalog_info``: the lake's name, snapshot count, latest snapshot and tables with their files."""

from __future__ import annotations

import duckdb

from pipeline.lake.rows import fetch_dicts, json_safe
from pipeline.sqltext import one_row, quote_literal


def catalog_info(con: duckdb.DuckDBPyConnection, lake_name: str) -> dict[str, object]:
    """Lake name, true snapshot count, the latest snapshot and the tables with their files."""
    count = one_row(con.execute(f"SELECT count(*) FROM {lake_name}.snapshots()"))[0]
    latest = fetch_dicts(con, f"SELECT * FROM {lake_name}.snapshots() ORDER BY snapshot_id DESC LIMIT 1")
    # the name as a literal: a Python parameter's binding imports pandas (0.9 s of --sql --json)
    # ducklake_table_info names a table's schema only by id: join the live schemas to it, so
    # equal table names in two schemas keep their own files
    name = quote_literal(lake_name)
    tables = con.execute(
        "WITH schemas AS (FROM query('SELECT schema_id, schema_name FROM ' || getvariable('lake_metadata') "
        "|| '.ducklake_schema WHERE end_snapshot IS NULL')), "
        "info AS (SELECT s.schema_name, i.table_name, i.file_count, i.file_size_bytes "
        f"         FROM ducklake_table_info({name}) i JOIN schemas s USING (schema_id)) "
        "SELECT t.schema_name, t.table_name, coalesce(i.file_count, 0), coalesce(i.file_size_bytes, 0) "
        "FROM duckdb_tables() t LEFT JOIN info i USING (schema_name, table_name) "
        f"WHERE t.database_name = {name} ORDER BY 1, 2").fetchall()
    return {
        "catalog_name": lake_name,
        "snapshot_count": int(count),
        "latest_snapshot": {c: json_safe(v) for c, v in latest[0].items()} if latest else None,
        "table_count": len(tables),
        "tables": [{"schema": s, "name": n, "data_files": int(f), "data_bytes": int(b)}
                   for s, n, f, b in tables],
    }
