"""``<lake>.ops.batches``: one row per promoted batch; the watermark is derived from it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import duckdb

from pipeline.lake.rows import fetch_dicts
from pipeline.lake.validate import REASON_CONFLICT
from pipeline.logs import process_name
from pipeline.settings import Settings
from pipeline.sqltext import one_row


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
    arrival_mark: datetime | None = None  # its plan saw every row that arrived up to here
    freshness_p50: float | None = None  # seconds from arrival to commit, of its new arrivals
    freshness_p95: float | None = None
    rows_behind_mark: int | None = None  # rows its plan's completeness check found behind the mark
    source: str | None = None  # database.schema.table it was read from (None: a batch from before)


def watermark(con: duckdb.DuckDBPyConnection, settings: Settings) -> datetime | None:
    """The largest ``event_timestamp`` already promoted for this table (None before any)."""
    return one_row(con.execute(
        f"SELECT max(max_event_timestamp) FROM {settings.batches_table} WHERE table_name = ?",
        [settings.lake_table],
    ))[0]


def bound_source(con: duckdb.DuckDBPyConnection, settings: Settings) -> str | None:
    """The source this lake table was last loaded from (None before its first recorded batch)."""
    row = con.execute(
        f"SELECT source FROM {settings.batches_table} WHERE table_name = ? AND source IS NOT NULL "
        "ORDER BY promoted_at DESC LIMIT 1", [settings.lake_table]).fetchone()
    return row[0] if row else None


def is_recorded(con: duckdb.DuckDBPyConnection, settings: Settings, batch_id: str) -> bool:
    return bool(one_row(con.execute(
        f"SELECT count(*) FROM {settings.batches_table} WHERE batch_id = ?", [batch_id]
    ))[0])


def last_arrivals(con: duckdb.DuckDBPyConnection, settings: Settings) -> tuple[datetime, datetime] | None:
    """The latest arrival mark a promoted batch's plan recorded, with that plan's ``upper``
    (None: no batch recorded one — a first load, or a lake loaded without an arrival column)."""
    row = con.execute(
        f"SELECT arrival_mark, window_upper FROM {settings.batches_table} WHERE table_name = ? "
        "AND arrival_mark IS NOT NULL ORDER BY arrival_mark DESC LIMIT 1", [settings.lake_table]).fetchone()
    return (row[0], row[1]) if row else None


def rows_held(con: duckdb.DuckDBPyConnection, settings: Settings, low: datetime, upper: datetime) -> int:
    """Rows the lake holds dated in ``(low, upper]``: loaded into the events table, or quarantined
    because they cannot load (the lake side of :mod:`pipeline.source.completeness`). A conflict's
    losing copy shares its id with a loaded row, so it is not counted again."""
    [[loaded]] = con.execute(f"SELECT count(*) FROM {settings.events_table} "
                             "WHERE event_timestamp > ? AND event_timestamp <= ?", [low, upper]).fetchall()
    [[quarantined]] = con.execute(
        f"SELECT count(*) FROM {settings.quarantine_table} WHERE table_name = ? AND reason <> ? "
        "AND TRY_CAST(event_timestamp AS TIMESTAMPTZ) > ? AND TRY_CAST(event_timestamp AS TIMESTAMPTZ) <= ?",
        [settings.lake_table, REASON_CONFLICT, low, upper]).fetchall()
    return int(loaded) + int(quarantined)


def record(con: duckdb.DuckDBPyConnection, settings: Settings, row: BatchRecord) -> None:
    values = asdict(row)
    con.execute(f"INSERT INTO {settings.batches_table} ({', '.join(values)}) "
                f"VALUES ({', '.join('?' * len(values))})", list(values.values()))


def steady_state(con: duckdb.DuckDBPyConnection, settings: Settings, since: datetime) -> dict[str, Any]:
    """Loads since ``since``: rows read (staged) per row inserted — about 1 when loads read only
    what arrived, the look-back's multiple when they re-read it — and freshness (seconds from a
    row's arrival to its commit: the median of the loads' p50s, the highest of their p95s)."""
    def totals(freshness: str) -> tuple:
        return one_row(con.execute(
            f"SELECT count(*), sum(rows_staged), sum(rows_inserted), {freshness} FROM "
            f"{settings.batches_table} WHERE table_name = ? AND promoted_at > ?",
            [settings.lake_table, since]))

    try:
        loads, read, inserted, p50, p95, behind = totals(
            "median(freshness_p50), max(freshness_p95), sum(rows_behind_mark)")
    except duckdb.BinderException:  # a lake made before these columns, read before its next load
        loads, read, inserted, p50, p95, behind = totals("NULL, NULL, NULL")
    return {"loads": loads, "rows_read": int(read or 0), "rows_inserted": int(inserted or 0),
            "rows_read_per_inserted": round(read / inserted, 3) if inserted else None,
            "freshness_p50_seconds": p50, "freshness_p95_seconds": p95,
            "rows_behind_mark": int(behind or 0)}


def recent_batches(con: duckdb.DuckDBPyConnection, settings: Settings, limit: int = 5) -> list[dict]:
    return fetch_dicts(con, f"SELECT * FROM {settings.batches_table} WHERE table_name = ? "
                       "ORDER BY promoted_at DESC LIMIT ?", [settings.lake_table, limit])
