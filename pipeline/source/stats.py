"""What the source holds: its clock, whether the table exists, and a window's row count."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

import psycopg
from psycopg import sql

from pipeline import invocation
from pipeline.errors import TerminalError
from pipeline.source.ddl import table_sql
from pipeline.source.window import Window
from pipeline.sqltext import one_row


@dataclass(frozen=True)
class WindowStats:
    """What the source holds inside a window: row count and timestamp range."""

    rows: int
    min_ts: datetime | None
    max_ts: datetime | None
    table_pages: int = 0  # a plain table's size in pages when counted (0: a view, a partitioned table)
    table_rows: int = 0  # its row estimate (pg_class.reltuples)


def server_now(conn: psycopg.Connection) -> datetime:
    """The source's own clock: ``upper`` comes from here so client clock skew cannot lose rows."""
    return one_row(conn.execute("SELECT now()"))[0]


def session_timezone(conn: psycopg.Connection) -> str:
    """The zone naive source timestamps are read in: SOURCE_TIMEZONE, else the database's own."""
    return one_row(conn.execute("SELECT current_setting('TimeZone')"))[0]


def table_exists(conn: psycopg.Connection, qualified: str) -> bool:
    return one_row(conn.execute("SELECT to_regclass(%s) IS NOT NULL", (qualified,)))[0]


def require_table(conn: psycopg.Connection, qualified: str) -> None:
    if not table_exists(conn, qualified):
        raise TerminalError(
            f"The source table {qualified} does not exist.",
            f"Create it by running the generator once ({invocation.generator_command()}), "
            "or point SOURCE_TABLE at the right table.",
        )


def rows_after(conn: psycopg.Connection, qualified: str, upper: datetime) -> int:
    """Rows dated after ``upper`` (the source's clock): future-dated events, which wait."""
    query = sql.SQL("SELECT count(*) FROM {t} WHERE event_timestamp > %(upper)s").format(
        t=table_sql(qualified))
    return one_row(conn.execute(query, {"upper": upper}))[0]


def rows_dated(conn: psycopg.Connection, qualified: str, window: Window) -> int:
    """Rows dated inside ``window``'s time range, whatever their arrival time: the completeness
    check's source count (:mod:`pipeline.source.completeness`), an index-only count on the
    ``event_timestamp`` index the source table contract asks for."""
    dated = replace(window, arrivals=None, nulls=False)
    query = sql.SQL("SELECT count(*) FROM {t} WHERE {w}").format(t=table_sql(qualified),
                                                                 w=sql.SQL(dated.where_sql()))
    return one_row(conn.execute(query, dated.params()))[0]


def window_stats(conn: psycopg.Connection, qualified: str, window: Window) -> WindowStats:
    """Rows and time range of ``window`` (the table's existence was checked by the preflight)."""
    query = sql.SQL(
        # ::timestamptz: a naive column's values are wall-clock time in the session's zone
        "SELECT count(*), min(event_timestamp)::timestamptz, max(event_timestamp)::timestamptz "
        "FROM {t} WHERE {w}"
    ).format(t=table_sql(qualified), w=sql.SQL(window.where_sql()))
    rows, lo, hi = one_row(conn.execute(query, window.params()))
    # a plain table's pages and rows: a window holding much of the table is read in page ranges
    # (pipeline.extract.partitions.page_ranges), each page once, not by time over an index
    pages, estimate = one_row(conn.execute(
        "SELECT CASE WHEN c.relkind = 'r' THEN pg_relation_size(c.oid) / current_setting('block_size')::int "
        "ELSE 0 END, greatest(c.reltuples, 0)::bigint FROM pg_class c WHERE c.oid = %s::regclass",
        (qualified,)))
    return WindowStats(rows=rows, min_ts=lo, max_ts=hi, table_pages=int(pages), table_rows=int(estimate))
