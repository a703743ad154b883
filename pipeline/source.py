"""Everything the pipeline and the generator do against the source Postgres."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg import sql

from pipeline.errors import SourceUnavailable, TerminalError, looks_transient
from pipeline.pgdsn import PgDsn, scrub_secrets
from pipeline.sqlfiles import read_sql, split_statements
from pipeline.window import Window


@contextmanager
def connect(dsn: PgDsn, *, autocommit: bool = True) -> Iterator[psycopg.Connection]:
    """A psycopg connection; an unreachable server becomes :class:`SourceUnavailable`."""
    try:
        conn = psycopg.connect(dsn.conninfo(), autocommit=autocommit, connect_timeout=10)
    except psycopg.OperationalError as exc:
        message = (f"Cannot connect to the source Postgres at {dsn.masked()}: "
                   f"{scrub_secrets(str(exc)).strip()}")
        hint = "Check SOURCE_PG_DSN (host, port, user, password, dbname) and that the server runs."
        if looks_transient(str(exc)):
            raise SourceUnavailable(message, hint) from None
        raise TerminalError(message, hint) from None
    with conn:
        yield conn


def table_ident(qualified: str) -> sql.Composed:
    schema, table = qualified.split(".")
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))


def ensure_table(conn: psycopg.Connection, qualified: str) -> None:
    """Create the source table and its timestamp index from ``sql/source_events.sql``."""
    schema, table = qualified.split(".")
    for statement in split_statements(read_sql("source_events.sql")):
        conn.execute(
            sql.SQL(statement).format(
                schema=sql.Identifier(schema),
                table=sql.Identifier(table),
                index=sql.Identifier(f"{table}_event_timestamp_idx"),
            )
        )


def table_exists(conn: psycopg.Connection, qualified: str) -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (qualified,)).fetchone()[0]


@dataclass(frozen=True)
class WindowStats:
    """What the source holds inside a window: row count and timestamp range."""

    rows: int
    min_ts: datetime | None
    max_ts: datetime | None


def server_now(conn: psycopg.Connection) -> datetime:
    """The source's own clock: ``upper`` comes from here so client clock skew cannot lose rows."""
    return conn.execute("SELECT now()").fetchone()[0]


def window_stats(conn: psycopg.Connection, qualified: str, window: Window) -> WindowStats:
    if not table_exists(conn, qualified):
        raise TerminalError(
            f"The source table {qualified} does not exist.",
            "Create it by running the generator once (uv run insert_event_data_loop.py), "
            "or point SOURCE_TABLE at the right table.",
        )
    query = sql.SQL(
        "SELECT count(*), min(event_timestamp), max(event_timestamp) FROM {t} WHERE {w}"
    ).format(t=table_ident(qualified), w=sql.SQL(window.where_sql()))
    rows, lo, hi = conn.execute(query, window.params()).fetchone()
    return WindowStats(rows=rows, min_ts=lo, max_ts=hi)
