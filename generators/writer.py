"""Write events into the source table with COPY, one transaction per batch."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import sql

from generators.events import Event, EventFactory, Session
from pipeline.settings.pgdsn import PgDsn
from pipeline.source.connect import connect
from pipeline.source.ddl import SESSIONS, ensure_table, table_sql

_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def copy_line(event: Event, created_at: datetime | None = None) -> str:
    """One row in COPY text format (tab-separated, backslash-escaped)."""
    details = _ENCODE(event.details)
    if "\\" in details:  # JSON escapes control characters, so only backslashes need doubling
        details = details.replace("\\", "\\\\")
    stamped = f"\t{created_at.isoformat()}" if created_at is not None else ""
    return (f"{event.event_id}\t{event.event_type}\t{event.event_timestamp.isoformat()}"
            f"\t{details}{stamped}\n")


def write_batch(conn: psycopg.Connection, table: str, events: Iterable[Event],
                created_at: datetime | None = None) -> int:
    """COPY ``events`` in one transaction; returns the number of rows committed. ``created_at``:
    stamp it as an application does, from its own clock (else the column's DEFAULT now())."""
    columns = "event_id, event_type, event_timestamp, details" + (", created_at" if created_at else "")
    with conn.transaction():
        return _copy(conn, table, columns, (copy_line(event, created_at) for event in events))


def write_linked(conn: psycopg.Connection, sessions_table: str, sessions: Iterable[Session],
                 events_table: str, events: Iterable[Event]) -> int:
    """COPY sessions and their events in **one** transaction: a reader sees all of them or none.
    Returns the rows committed."""
    lines = (f"{s.session_id}\t{s.user_id}\t{s.started_at.isoformat()}\t{s.ip_address}\n" for s in sessions)
    with conn.transaction():
        return (_copy(conn, sessions_table, "session_id, user_id, started_at, ip_address", lines)
                + _copy(conn, events_table, "event_id, event_type, event_timestamp, details",
                        map(copy_line, events)))


def _copy(conn: psycopg.Connection, table: str, columns: str, lines: Iterable[str]) -> int:
    statement = sql.SQL(f"COPY {{}} ({columns}) FROM STDIN").format(table_sql(table))
    rows = 0
    with conn.cursor() as cur, cur.copy(statement) as copy:
        buffer: list[str] = []
        for line in lines:
            buffer.append(line)
            if len(buffer) >= 5000:
                copy.write("".join(buffer))
                rows += len(buffer)
                buffer.clear()
        if buffer:
            copy.write("".join(buffer))
            rows += len(buffer)
    return rows


def truncate(conn: psycopg.Connection, table: str) -> None:
    conn.execute(sql.SQL("TRUNCATE {}").format(table_sql(table)))


def add_events(dsn: PgDsn, table: str, rows: int, seed: int, *, late_by: timedelta | None = None,
               now: datetime | None = None) -> int:
    """Write ``rows`` events from ``seed`` (all of them ``late_by`` old when given) in one
    transaction, creating the table first if needed; returns the rows committed.
    The demo and the tests write events through this."""
    events = EventFactory(seed).batch(rows, now or datetime.now(UTC), late_fraction=1.0 if late_by else 0.0,
                                      late_by=late_by or timedelta(0))
    with connect(dsn, autocommit=False) as conn:
        ensure_table(conn, table)
        conn.commit()
        return write_batch(conn, table, events)


def add_sessions(dsn: PgDsn, sessions_table: str, events_table: str, sessions: int, seed: int, *,
                 now: datetime | None = None) -> int:
    """Write ``sessions`` sessions and their events (:meth:`EventFactory.sessions`) in one
    transaction, creating both tables first if needed; returns the rows committed.
    The demo and the tests write linked rows through this."""
    made, events = EventFactory(seed).sessions(sessions, now or datetime.now(UTC))
    with connect(dsn, autocommit=False) as conn:
        ensure_table(conn, sessions_table, SESSIONS)
        ensure_table(conn, events_table)
        conn.commit()
        return write_linked(conn, sessions_table, made, events_table, events)
