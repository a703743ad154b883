"""Write events into the source table with COPY, one transaction per batch."""

from __future__ import annotations

import json
from collections.abc import Iterable

import psycopg
from psycopg import sql

from generators.events import Event
from pipeline.source import table_ident

_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def copy_line(event: Event) -> str:
    """One row in COPY text format (tab-separated, backslash-escaped)."""
    details = _ENCODE(event.details)
    if "\\" in details:  # JSON escapes control characters, so only backslashes need doubling
        details = details.replace("\\", "\\\\")
    return (f"{event.event_id}\t{event.event_type}\t{event.event_timestamp.isoformat()}"
            f"\t{details}\n")


def write_batch(conn: psycopg.Connection, table: str, events: Iterable[Event]) -> int:
    """COPY ``events`` in one transaction; returns the number of rows committed."""
    statement = sql.SQL(
        "COPY {} (event_id, event_type, event_timestamp, details) FROM STDIN"
    ).format(table_ident(table))
    rows = 0
    with conn.transaction(), conn.cursor() as cur, cur.copy(statement) as copy:
        buffer: list[str] = []
        for event in events:
            buffer.append(copy_line(event))
            if len(buffer) >= 5000:
                copy.write("".join(buffer))
                rows += len(buffer)
                buffer.clear()
        if buffer:
            copy.write("".join(buffer))
            rows += len(buffer)
    return rows


def truncate(conn: psycopg.Connection, table: str) -> None:
    conn.execute(sql.SQL("TRUNCATE {}").format(table_ident(table)))
