"""One consistent Postgres snapshot for a whole extraction.

The planner opens a REPEATABLE READ transaction, exports its snapshot and keeps the
transaction open while the engines read; every reader (each Spark JDBC partition, dlt's
connection) imports that snapshot before its first query. So the planner's row count and
the rows the readers see are the same set, however many rows commit meanwhile, and a
batch that staged fewer rows than were counted is a real loss, never a race.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

import psycopg

from pipeline.process import cancellable
from pipeline.settings.pgdsn import PgDsn
from pipeline.source.arrivals import arrival_mark, oldest_writer
from pipeline.source.connect import connect
from pipeline.source.give_way import GaveWay, GiveWay
from pipeline.source.stats import PartEnds
from pipeline.sqltext import one_row, quote_literal, quote_qualified


@dataclass(frozen=True)
class PlannerSnapshot:
    conn: psycopg.Connection  # inside the snapshot's transaction
    snapshot_id: str  # for readers to import
    arrival_mark: datetime | None  # rows arriving up to here are all visible (pipeline.source.arrivals)
    # the oldest transaction writing in the database as the snapshot was taken (64-bit): every row
    # written by an older one that committed is visible in it (recorded with the batch; the next
    # plan reads newer ones)
    xmin: int | None = None
    ends: PartEnds = field(default_factory=PartEnds, compare=False)  # the walks made in it
    # a load's: ends the snapshot when a statement waits for its locks, until the part is staged
    give_way: GiveWay | None = field(default=None, compare=False)

    def give_way_while_read(self) -> None:
        """Other sessions read in it (or it is held idle, taken ahead) until :meth:`keep`: it gives way
        to a statement waiting for its locks (a snapshot taken without ``give_way`` never does)."""
        if self.give_way is not None:
            self.give_way.arm()

    def keep(self) -> None:
        """What was read in this snapshot is staged: it no longer gives way (GaveWay if it did)."""
        if self.give_way is not None:
            self.give_way.keep()


class TablesBusy(Exception):
    """A table to lock before the snapshot is held, or waited for, by a statement that conflicts
    (an ALTER TABLE): the tables, comma-separated."""


@contextmanager
def exported_snapshot(dsn: PgDsn, *, arrivals: bool = True, locked: Sequence[str] = (),
                      give_way: bool = False) -> Iterator[PlannerSnapshot]:
    """A connection inside a REPEATABLE READ transaction, the id of its exported snapshot, and
    with ``arrivals`` its arrival mark (read just before the snapshot is taken; a source without
    an arrival column gets None and no look at pg_stat_activity). The snapshot can be imported
    until the block ends (the transaction is rolled back).

    ``locked``: tables (schema.table) locked for reading before the snapshot is taken, at once or
    not at all (:class:`TablesBusy` when a statement holds or waits for a stronger lock: an ALTER
    TABLE). A table rewritten (ALTER … TYPE, TRUNCATE, VACUUM FULL) after a snapshot
    but before that snapshot first reads it reads empty in it; locked first, it cannot be.

    ``give_way``: a load's snapshot, read by other sessions (its readers), ends when a statement
    waits for its locks, from :meth:`PlannerSnapshot.give_way_while_read` to
    :meth:`PlannerSnapshot.keep` (:mod:`pipeline.source.give_way`); the block then ends in
    :class:`~pipeline.source.give_way.GaveWay`, whatever it raised."""
    # a stop request cancels the planner's query (a one-shot command's: pipeline.process)
    with connect(dsn, autocommit=True) as conn, cancellable(conn.cancel):
        mark = arrival_mark(conn) if arrivals else None
        xmin = oldest_writer(conn)
        conn.autocommit = False
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        try:
            if locked:  # a LOCK takes no snapshot: the transaction's is taken by the next statement
                try:
                    conn.execute(f"LOCK TABLE {', '.join(map(quote_qualified, locked))} "
                                 "IN ACCESS SHARE MODE NOWAIT")
                except psycopg.errors.LockNotAvailable:
                    raise TablesBusy(", ".join(locked)) from None
            snapshot_id = one_row(conn.execute("SELECT pg_export_snapshot()"))[0]
            with contextlib.ExitStack() as watching:
                watch = (watching.enter_context(GiveWay(dsn, conn.info.backend_pid, snapshot_id))
                         if give_way else None)
                try:
                    yield PlannerSnapshot(conn, snapshot_id, mark, xmin, give_way=watch)
                except GaveWay:
                    raise
                except Exception as exc:
                    if watch is not None and watch.waiter is not None:
                        raise watch.waiter.gave_way() from exc
                    raise
                if watch is not None and watch.waiter is not None:  # read after it ended: not to be used
                    raise watch.waiter.gave_way()
        finally:
            with contextlib.suppress(psycopg.Error):  # a dead connection must not mask the real error
                conn.rollback()


def import_statements(snapshot_id: str) -> list[str]:
    """What a reader runs first in its transaction to see exactly the planner's snapshot."""
    return ["SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            f"SET TRANSACTION SNAPSHOT {quote_literal(snapshot_id)}"]
