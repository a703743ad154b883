"""A load's planner snapshot gives way to the application's DDL.

The planner's transaction holds ACCESS SHARE on the tables it planned (read or locked) until its
part is staged. A statement that needs a stronger lock (ALTER TABLE, DROP, TRUNCATE, VACUUM FULL,
CLUSTER, LOCK) waits for it, and every later lock request on those tables queues behind that
statement: the application's INSERTs, and the part's own readers, which the load waits for.
Postgres sees no cycle (the load's wait for its readers is in the client), so nothing moved until
the statement's lock_timeout, or LOAD_TIMEOUT, while the application could not write.

While a load's snapshot may still give way (planned, being read, or taken ahead for the next part),
:class:`GiveWay` looks every :data:`LOOK_EVERY_SECONDS` for a session waiting on the planner's
locks. Seeing one, it ends the planner's session (the transaction and its locks go with it, and no
reader can import the snapshot any more) and the readers' tagged with the snapshot
(:func:`reader_tag`): the statement goes through at once. Nothing read
in that snapshot is promoted; the part is planned again after the statement (:class:`GaveWay`).
Once the part is staged the load keeps its snapshot (:meth:`GiveWay.keep`): a statement coming then
waits for the part's commit and its check, which read no table through another session.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from types import TracebackType

import psycopg

from pipeline.errors import TransientError
from pipeline.settings.pgdsn import PgDsn

log = logging.getLogger(__name__)

LOOK_EVERY_SECONDS = 0.25  # an application's INSERT queued behind the statement waits about this long

# a session waiting for a lock the planner holds (pg_blocking_pids: holders of a conflicting lock,
# and sessions ahead in the lock's queue asking for one); the oldest wait first
_WAITING = ("SELECT pid, left(regexp_replace(query, '\\s+', ' ', 'g'), 120) FROM pg_stat_activity "
            "WHERE %s = ANY(pg_blocking_pids(pid)) ORDER BY state_change LIMIT 1")


def reader_tag(snapshot_id: str, batch_id: str) -> str:
    """The application_name of a batch's readers in a snapshot (what a cancelled extraction's reads
    and a snapshot giving way are found by; Postgres keeps 63 bytes)."""
    return f"event-lake {snapshot_id} {batch_id}"[:63]


@dataclass(frozen=True)
class Waiter:
    """The session a snapshot gave way to."""

    pid: int
    statement: str

    def gave_way(self) -> GaveWay:
        return GaveWay(self.statement, self.pid)


class GaveWay(TransientError):
    """A load's planner snapshot ended so that a statement waiting for its tables' locks could run;
    nothing read in it was promoted. The load plans the part again after the statement."""

    def __init__(self, statement: str, pid: int = 0) -> None:
        self.pid = pid
        super().__init__(
            f"A statement waited for the source tables this load was reading (pid {pid}: "
            f"{statement}): the load ended its snapshot and promoted nothing of it.",
            "Run the load again: it plans the same rows after the statement.")


class GiveWay:
    """Watches one planner session (``planner_pid``) while its snapshot may give way, from
    :meth:`arm` (its readers start, or it is taken ahead: held idle) to :meth:`keep`: see the
    module. While it is planned alone nothing waits on the statement but the plan's own reads,
    and a load with nothing to read is never watched (no second connection per idle tick). Owns its
    watching connection and thread; :meth:`close` ends both."""

    def __init__(self, dsn: PgDsn, planner_pid: int, snapshot_id: str) -> None:
        self._dsn, self._planner, self._snapshot_id = dsn, planner_pid, snapshot_id
        self._decided = threading.Lock()  # a waiter seen and the planner ended, or the snapshot kept
        self._stop = threading.Event()
        self._kept = False
        self.waiter: Waiter | None = None
        self._thread: threading.Thread | None = None

    def arm(self) -> None:
        """Watch from now on (once; nothing after :meth:`keep`)."""
        with self._decided:
            if self._thread is not None or self._kept:
                return
            self._thread = threading.Thread(target=self._watch, name="give-way", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        if self._stop.wait(LOOK_EVERY_SECONDS):  # most small reads end before the first look
            return
        try:
            with psycopg.connect(self._dsn.conninfo(), autocommit=True, connect_timeout=10,
                                 application_name="event-lake give-way") as conn:
                while True:
                    row = conn.execute(_WAITING, (self._planner,)).fetchone()
                    if row is not None:
                        self._give_way(conn, Waiter(int(row[0]), str(row[1] or "")))
                        return
                    if self._stop.wait(LOOK_EVERY_SECONDS):
                        return
        except psycopg.Error as exc:  # the source gone: the load meets that its own way
            log.debug("the watch for statements waiting on the load's snapshot stopped: %s", exc)

    def _give_way(self, conn: psycopg.Connection, waiter: Waiter) -> None:
        with self._decided:
            if self._kept:  # staged meanwhile: the statement waits for the commit
                return
            self.waiter = waiter
            conn.execute("SELECT pg_terminate_backend(%s)", (self._planner,))
            # the readers hold the lock too, running or idle in their transaction (a reader whose
            # connection is not closed yet); those not started cannot import the snapshot any more
            ended = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE application_name LIKE %s",
                                 (reader_tag(self._snapshot_id, "%"),)).fetchall()
        log.info("a statement waits for the source tables this load reads (pid %d: %s): the load gives "
                 "way to it (its snapshot and %d reader(s) ended) and plans the part again after it",
                 waiter.pid, waiter.statement, len(ended))

    def keep(self) -> None:
        """The part is staged: from now on the snapshot is kept (a statement waits for the commit and
        the check). :class:`GaveWay` if it already gave way: what was read in it is not promoted."""
        with self._decided:
            self._kept = True
        self._stop.set()
        if self.waiter is not None:
            raise self.waiter.gave_way()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> GiveWay:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

