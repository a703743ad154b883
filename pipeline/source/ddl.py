"""Create the source table (the generator and the demo write into it)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from pipeline.sqltext import one_row, quote_ident, quote_qualified, read_sql, split_statements


def table_sql(qualified: str) -> sql.SQL:
    """``public.events`` as a quoted identifier for psycopg's ``sql`` composition."""
    return sql.SQL(quote_qualified(qualified))


def ensure_table(conn: psycopg.Connection, qualified: str) -> None:
    """Create the source table and its time and arrival indexes from ``sql/source_events.sql``,
    as far as they are missing. When all are there nothing runs: even ``CREATE INDEX IF NOT
    EXISTS`` takes a lock that waits for every open writer of the table (a writer's transaction
    held open would stall each generator start behind it)."""
    schema, table = qualified.split(".")
    names = {"index": f"{table}_event_timestamp_idx", "arrival_index": f"{table}_created_at_idx"}
    present = one_row(conn.execute(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = ANY(%s)", (schema, [table, *names.values()])))[0]
    if present == 1 + len(names):
        return
    for statement in split_statements(read_sql("source_events.sql")):
        conn.execute(sql.SQL(statement.format(schema=quote_ident(schema), table=quote_ident(table),
                                              **{k: quote_ident(v) for k, v in names.items()})))
