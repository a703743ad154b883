"""``<lake>.ops.batches``: one row per promoted batch; the watermark is derived from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import duckdb

from pipeline.lake.rows import fetch_dicts
from pipeline.logs import process_name
from pipeline.settings import Settings


@dataclass(frozen=True)
class BatchRecord:
    """One row of ``ops.batches``, written in the same transaction as the batch's rows."""

    batch_id: str
    table_name: str
    engine: str
    window_low: datetime | None
    window_upper: datetime
    rows_staged: int
    rows_inserted: int
    rows_duplicate: int
    min_event_timestamp: datetime | None
    max_event_timestamp: datetime | None
    extract_seconds: float
    promote_seconds: float
    staged_at: datetime
    promoted_at: datetime
    promoted_by: str = field(default_factory=process_name)  # this process, at promotion


def watermark(con: duckdb.DuckDBPyConnection, settings: Settings) -> datetime | None:
    """The largest ``event_timestamp`` already promoted for this table (None before any)."""
    return con.execute(
        f"SELECT max(max_event_timestamp) FROM {settings.batches_table} WHERE table_name = ?",
        [settings.lake_table],
    ).fetchone()[0]


def is_recorded(con: duckdb.DuckDBPyConnection, settings: Settings, batch_id: str) -> bool:
    return bool(con.execute(
        f"SELECT count(*) FROM {settings.batches_table} WHERE batch_id = ?", [batch_id]
    ).fetchone()[0])


def record(con: duckdb.DuckDBPyConnection, settings: Settings, row: BatchRecord) -> None:
    con.execute(
        f"INSERT INTO {settings.batches_table} VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [row.batch_id, row.table_name, row.engine, row.window_low, row.window_upper,
         row.rows_staged, row.rows_inserted, row.rows_duplicate, row.min_event_timestamp,
         row.max_event_timestamp, row.extract_seconds, row.promote_seconds, row.staged_at,
         row.promoted_at, row.promoted_by],
    )


def recent_batches(con: duckdb.DuckDBPyConnection, settings: Settings, limit: int = 5) -> list[dict]:
    return fetch_dicts(con, f"SELECT * FROM {settings.batches_table} WHERE table_name = ? "
                       "ORDER BY promoted_at DESC LIMIT ?", [settings.lake_table, limit])
