"""When did the rows a snapshot cannot see start arriving? The arrival mark of a plan.

A row's arrival time (``created_at``, the column's ``DEFAULT now()``) is the start of the
transaction that wrote it, which may commit long after. So a plan cannot say "every row that
arrived before my snapshot is in it"; it can say "every row a transaction started before this
mark wrote is in it": the mark is the start of the oldest transaction still open in the
database (or now, if none), read *before* the snapshot is taken. A transaction open at the
snapshot either was already open at that read (so it is counted) or began after it.

The next plan reads rows that arrived after the mark (:class:`pipeline.source.window.Arrivals`).
Where the mark cannot be vouched for, it is None and the run reads its whole look-back as before:
the role cannot see other roles' transactions (grant it ``pg_read_all_stats``), a prepared
(two-phase) transaction is pending, or the source is a standby.

A writer that sets the arrival column from its own clock instead of the database's is covered
by :data:`SKEW_MARGIN`; a clock further ahead is reported (:func:`rows_ahead`), one behind by more
is what the scheduled ``--reconcile`` finds.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import psycopg
from psycopg import sql

from pipeline.source.ddl import table_sql
from pipeline.sqltext import one_row, quote_qualified

log = logging.getLogger(__name__)

# A writer's clock may differ from the database's by this much without a row being skipped:
# the mark is moved back by it (at 1k events/s and 2-s loads, 0.2 s re-reads 10% of a load).
SKEW_MARGIN = timedelta(milliseconds=200)

_MARK_SQL = """
SELECT statement_timestamp(),
       (SELECT min(xact_start) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
           AND backend_type NOT LIKE 'autovacuum%'),  -- vacuum writes no rows
       (SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND backend_type IS NULL),  -- another role's session, all but its name hidden
       (SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()),
       pg_is_in_recovery()
"""


def arrival_mark(conn: psycopg.Connection) -> datetime | None:
    """Read before the planner's snapshot (in its own statement, outside that transaction): the
    start of the oldest open transaction, or now, minus :data:`SKEW_MARGIN`; None when the open
    transactions cannot all be seen (the reason is logged)."""
    now, oldest, hidden, prepared, standby = one_row(conn.execute(_MARK_SQL))
    if hidden:
        log.info("reading the whole look-back: this role cannot see the start of %d other session(s)' "
                 "transactions (GRANT pg_read_all_stats TO it to read only new arrivals)", hidden)
        return None
    if prepared:
        log.info("reading the whole look-back: %d prepared transaction(s) are pending", prepared)
        return None
    if standby:
        return None
    return min(now, oldest or now) - SKEW_MARGIN


_WRITERS_SQL = """
SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
       (SELECT array_agg(backend_xid::text::bigint) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL
           AND backend_type NOT LIKE 'autovacuum%')
"""


def oldest_writer(conn: psycopg.Connection) -> int:
    """Read before the planner's snapshot (outside its transaction): the 64-bit id of the oldest
    transaction writing in this database now, or the next id to be assigned if none. Every row a
    snapshot taken after cannot see was written by it or a later one (a subtransaction's id follows
    its parent's). Per database, unlike the snapshot's own xmin: a long transaction in another
    database of the cluster (a DuckLake catalog beside the source) does not make loads read again."""
    xmax, running = one_row(conn.execute(_WRITERS_SQL))
    xmax = int(xmax)
    # 32-bit ids of running transactions, each the latest id below xmax with those low bits
    return min([xmax, *(xmax - ((xmax - int(x)) % 2 ** 32) for x in running or [])])


def rows_ahead(conn: psycopg.Connection, qualified: str, column: str,
               now: datetime) -> tuple[int, datetime | None]:
    """Rows whose arrival time is after the database's clock, and the latest: a writer that
    stamps its own clock, running ahead (index on ``column``: a look at the newest entries)."""
    query = sql.SQL("SELECT count(*), max({c}) FROM {t} WHERE {c} > %(now)s").format(
        c=sql.Identifier(column), t=table_sql(qualified))
    count, latest = one_row(conn.execute(query, {"now": now}))
    return int(count), latest


# defaults that stamp a row with the database's own clock as it is written
_DATABASE_STAMPS = ("now()", "current_timestamp", "transaction_timestamp()", "statement_timestamp()",
                    "clock_timestamp()", "localtimestamp")


def stamped_by_database(conn: psycopg.Connection, qualified: str, column: str) -> bool | None:
    """Does ``column`` default to the database's clock? None: the relation is not a table (a view,
    a foreign table), whose column defaults say nothing about how its rows are stamped."""
    row = conn.execute(
        "SELECT c.relkind IN ('r', 'p'), pg_get_expr(d.adbin, d.adrelid) FROM pg_class c "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = %s AND NOT a.attisdropped "
        "LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum WHERE c.oid = %s::regclass",
        (column, quote_qualified(qualified))).fetchone()
    if row is None or not row[0]:
        return None
    default = (row[1] or "").lower()
    return any(stamp in default for stamp in _DATABASE_STAMPS)


def arrival_note(column: str, stamped: bool | None, behind: int) -> str | None:
    """What ``--status`` and ``doctor`` say about an arrival column the database does not set
    (or that rows arrived behind the mark), and what the pipeline does about it; None when fine."""
    if stamped and not behind:
        return None
    why = (f"rows arrived with {column} behind the arrival mark ({behind} in the last hour)" if behind
           else f"{column} is not set by the database (no DEFAULT now())" if stamped is False
           else f"{column} comes from a view or foreign table, so the database may not set it")
    return (f"{why}: writers' clocks, backfills or the application decide it. Nothing is lost: every run "
            f"counts the look-back and reads it whole when rows arrived behind the mark (slower loads). "
            f"For the fast path, give {column} DEFAULT now() and let writers leave it out")
