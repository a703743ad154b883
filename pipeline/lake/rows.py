"""Query results as dicts keyed by column name: the one place a DuckDB cursor becomes rows; and
values as JSON can carry them."""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import uuid
from decimal import Decimal
from typing import Any

import duckdb

Rows = list[dict[str, Any]]


def fetch_dicts(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> Rows:
    """Every row of ``sql`` as ``{column: value}``, in the result's order."""
    cursor = con.execute(sql, params or [])
    columns = [c[0] for c in cursor.description]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def json_safe(value: Any, type_name: str = "") -> Any:
    """A value JSON can carry without loss: ISO timestamps, exact decimals, JSON as objects."""
    if value is None or isinstance(value, bool | int | str) and not type_name.startswith("JSON"):
        return value
    if type_name.startswith("JSON") and isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return value  # written as an exact JSON number by simplejson(use_decimal=True)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return str(value)
