"""Query results as dicts keyed by column name: the one place a DuckDB cursor becomes rows."""

from __future__ import annotations

from typing import Any

import duckdb

Rows = list[dict[str, Any]]


def fetch_dicts(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> Rows:
    """Every row of ``sql`` as ``{column: value}``, in the result's order."""
    cursor = con.execute(sql, params or [])
    columns = [c[0] for c in cursor.description]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
