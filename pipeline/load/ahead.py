"""The next part of a history, planned ahead: its planner snapshot is taken once this part is
read, before it commits (a first load's first part: while the lake's tables are made), and the walk
to its end (:func:`pipeline.source.stats.part_end`, a range scan of the time index over about
BACKFILL_BATCH_ROWS entries) runs in it on a thread meanwhile. The plan then finds the walk made
(:class:`pipeline.source.stats.PartEnds`) instead of making the load wait for it: it was about a
tenth of a first load.

Taking the snapshot earlier changes nothing a plan relies on: it still follows this part's read
(taken as the read began, it missed rows re-dated into the next part's range during the read),
the source is not what the lake's commit changes, and every lake read of the plan is made when it
is planned, after this part committed. Its tables are locked for reading first, at once or not at
all (see :mod:`pipeline.source.snapshot`), and a statement that then waits for that lock ends the
snapshot (:mod:`pipeline.source.give_way`): the next part is planned after the statement.
Nothing is written ahead: a kill, a stop or a failure only rolls the snapshot's transaction back.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from datetime import datetime
from types import TracebackType

import psycopg

from pipeline.errors import PipelineError
from pipeline.settings import TableSpec
from pipeline.source import shape, stats
from pipeline.source.snapshot import PlannerSnapshot

log = logging.getLogger(__name__)


class PartAhead:
    """The next image's planner snapshot (``taking``: how the load takes one), with the walks to
    its histories' part ends made in it on a thread: ``walks`` holds, per table reading its
    history, where its next part starts (this part's bound; None: its first part) and the part's
    rows. Owns the snapshot's transaction until :meth:`take` hands it over, or :meth:`close`."""

    def __init__(self, taking: contextlib.AbstractContextManager[PlannerSnapshot],
                 walks: list[tuple[TableSpec, datetime | None, int]]) -> None:
        self._stack = contextlib.ExitStack()
        self.snapshot = self._stack.enter_context(taking)  # taken now: the next image's instant
        self.snapshot.give_way_while_read()  # held idle, its table locked, until a plan takes it
        self._walked, self._taken = True, False
        self._thread = threading.Thread(target=self._walk, args=(walks,), name="part-end walk", daemon=True)
        self._thread.start()

    def _walk(self, walks: list[tuple[TableSpec, datetime | None, int]]) -> None:
        conn = self.snapshot.conn
        try:
            for table, low, rows in walks:
                # what plan_batch asks in this snapshot, asked the same way: its answer is kept for it
                source = shape.SourceRelation.of(conn, table)
                self.snapshot.ends.end(conn, source, low, stats.server_now(conn), rows)
        except Exception as exc:  # noqa: BLE001  cancelled, the source gone, a table dropped: the plan
            # starts over in a fresh snapshot, and meets what failed here the way it reports it
            log.debug("the walk ahead to the next part's end failed: %s", exc)
            self._walked = False

    def take(self) -> PlannerSnapshot | None:
        """The snapshot, once the walks are made (the caller then uses it inside ``with`` this
        object, which ends its transaction as a ``with`` of the snapshot would); None when they
        failed or its transaction is gone (the server ended the session while it waited: plan in a
        fresh one, and :meth:`close` this)."""
        self._thread.join()
        if not self._walked:
            return None
        if self.snapshot.give_way is not None and self.snapshot.give_way.waiter is not None:
            return None  # it gave way to a statement waiting for its locks: the plan waits for that
        try:
            self.snapshot.conn.execute("SELECT 1")
        except psycopg.Error:  # the server ended the session while it waited
            return None
        self._taken = True
        return self.snapshot

    def close(self) -> None:
        """Stop a walk still running, and end the snapshot's transaction."""
        self.__exit__(None, None, None)

    def __enter__(self) -> PartAhead:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        """As :meth:`close`; with the error the block that used the snapshot failed with, its
        transaction ends as it would have in a ``with`` of its own: rolled back, that error the one
        raised (ended as if all went well, a source gone meanwhile replaced it with "Lost the
        source"). One never handed over read nothing anyone used: a session the source ended
        meanwhile is no error then."""
        if self._thread.is_alive():
            with contextlib.suppress(psycopg.Error):
                self.snapshot.conn.cancel()
            self._thread.join()
        if self._taken:
            self._stack.__exit__(kind, error, trace)
            return
        with contextlib.suppress(PipelineError, psycopg.Error):
            self._stack.close()
