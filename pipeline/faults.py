"""Fault injection for the crash-safety and shutdown tests: a seam handed to a run, not checks
inside the product's code paths.

A run takes a :class:`Faults` (the product's, :data:`NO_FAULTS`, does nothing at each point) and
calls it at the three places a test may break it. Only the command line builds an
:class:`InjectedFault`, from ``EVENT_LAKE_FAULT=<point>``, because the crash tests kill a real
process from outside:

- ``after-stage``: SIGKILL once the manifest is written, nothing promoted;
- ``before-commit``: SIGKILL with the rows and state inserted inside the open DuckLake
  transaction, COMMIT not yet sent (SIGKILL gives no chance to clean up: an OOM kill, a power cut);
- ``lose-lock``: the promote lock's connection dies just before the commit (a catalog network
  blip), so the fencing check must roll the batch back;
- ``slow-read``: every read slice sleeps :data:`SLOW_READ_SECONDS` in Postgres, so a Spark job
  is really running on the executors while a test cancels it.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass

log = logging.getLogger(__name__)
SLOW_READ_SECONDS = 30
POINTS = ("after-stage", "before-commit", "lose-lock", "slow-read")


class Faults:
    """The points a run offers a test; each does nothing here."""

    def after_stage(self) -> None:
        """The batch is staged with its manifest; promotion has not begun."""

    def before_commit(self, lease: object) -> None:
        """The batch's rows and state row are in the open transaction; ``lease`` is the promote lock."""

    def read_query(self, query: str) -> str:
        """The SELECT each read slice runs (``query`` unchanged here)."""
        return query


NO_FAULTS = Faults()


@dataclass(frozen=True)
class InjectedFault(Faults):
    """One of :data:`POINTS`, set by ``EVENT_LAKE_FAULT`` for a test that breaks a real process."""

    point: str

    def after_stage(self) -> None:
        self._crash_at("after-stage")

    def before_commit(self, lease: object) -> None:
        self._crash_at("before-commit")
        conn = getattr(lease, "conn", None)
        if self.point == "lose-lock" and conn is not None:
            log.warning("EVENT_LAKE_FAULT=lose-lock: dropping the promote lock now")
            conn.close()

    def read_query(self, query: str) -> str:
        """Under ``slow-read`` the query first sleeps in Postgres each time it runs (once per read
        slice; not during Spark's JDBC schema lookup, whose ``WHERE 1=0`` Postgres folds away)."""
        if self.point != "slow-read":
            return query
        return f"SELECT q.* FROM ({query}) q, (SELECT pg_sleep({SLOW_READ_SECONDS})) delay"

    def _crash_at(self, point: str) -> None:
        if self.point == point:
            log.warning("EVENT_LAKE_FAULT=%s: killing this process now", point)
            os.kill(os.getpid(), signal.SIGKILL)


def injected(point: str | None) -> Faults:
    """The seam for ``EVENT_LAKE_FAULT`` (the command line's); :data:`NO_FAULTS` when unset."""
    return InjectedFault(point) if point else NO_FAULTS
