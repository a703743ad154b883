"""Create the source table (the generator and the demo write into it)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from pipeline.sqltext import one_row, quote_ident, quote_qualified, read_sql, split_statements


def table_sql(qualified: str) -> sql.SQL:
    """``public.events`` as a quoted identifier for psycopg's ``sql`` composition."""
    return sql.SQL(quote_qualified(qualified))


@dataclass(frozen=True)
class TableKind:
    """A source table the generator makes: its DDL file and the column of its time index."""

    ddl: str
    time_column: str


EVENTS = TableKind("source_events.sql", "event_timestamp")
# the generator's --sessions table: its own id and time columns, no event_type or details
SESSIONS = TableKind("source_sessions.sql", "started_at")


def ensure_table(conn: psycopg.Connection, qualified: str, kind: TableKind = EVENTS) -> None:
    """Create the source table and its time and arrival indexes from its DDL file in ``sql/``,
    as far as they are missing. When all are there nothing runs: even ``CREATE INDEX IF NOT
    EXISTS`` takes a lock that waits for every open writer of the table (a writer's transaction
    held open would stall each generator start behind it)."""
    schema, table = qualified.split(".")
    names = {"index": f"{table}_{kind.time_column}_idx", "arrival_index": f"{table}_created_at_idx"}
    present = one_row(conn.execute(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = ANY(%s)", (schema, [table, *names.values()])))[0]
    if present == 1 + len(names):
        return
    for statement in split_statements(read_sql(kind.ddl)):
        conn.execute(sql.SQL(statement.format(schema=quote_ident(schema), table=quote_ident(table),
                                              **{k: quote_ident(v) for k, v in names.items()})))
