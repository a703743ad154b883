"""Create the source table (the generator and the demo write into it)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from pipeline.sqltext import quote_ident, quote_qualified, read_sql, split_statements


def table_sql(qualified: str) -> sql.SQL:
    """``public.events`` as a quoted identifier for psycopg's ``sql`` composition."""
    return sql.SQL(quote_qualified(qualified))


def ensure_table(conn: psycopg.Connection, qualified: str) -> None:
    """Create the source table and its timestamp index from ``sql/source_events.sql``."""
    schema, table = qualified.split(".")
    for statement in split_statements(read_sql("source_events.sql")):
        conn.execute(sql.SQL(statement.format(
            schema=quote_ident(schema), table=quote_ident(table),
            index=quote_ident(f"{table}_event_timestamp_idx"))))
