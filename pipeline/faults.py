"""Fault injection for the crash-safety and shutdown tests: ``EVENT_LAKE_FAULT=<point>``.

Crash points: ``after-stage`` (manifest written, nothing promoted) and ``before-commit`` (rows
and state inserted inside the open DuckLake transaction, COMMIT not yet sent). SIGKILL gives
the process no chance to clean up, exactly like an OOM kill or a power cut.
``lose-lock``: the promote lock's connection dies just before the commit (a catalog network
blip), so the fencing check must roll the batch back.
``slow-read``: every JDBC read partition sleeps :data:`SLOW_READ_SECONDS` in Postgres, so a
Spark job is really running on the executors while a test cancels it.
"""

from __future__ import annotations

import logging
import os
import signal

from pipeline.settings import Settings

SLOW_READ_SECONDS = 30


def maybe_crash(settings: Settings, point: str) -> None:
    if settings.fault == point:
        logging.getLogger(__name__).warning("EVENT_LAKE_FAULT=%s: killing this process now", point)
        os.kill(os.getpid(), signal.SIGKILL)


def slow_read(settings: Settings, query: str) -> str:
    """``query``, which under ``slow-read`` first sleeps in Postgres each time it runs (once per
    read partition; not during Spark's schema lookup, whose ``WHERE 1=0`` Postgres folds away)."""
    if settings.fault != "slow-read":
        return query
    return f"SELECT q.* FROM ({query}) q, (SELECT pg_sleep({SLOW_READ_SECONDS})) delay"


def maybe_lose_lock(settings: Settings, lease: object) -> None:
    """Under ``lose-lock``, close the lease's catalog connection, as a network cut would."""
    conn = getattr(lease, "conn", None)
    if settings.fault == "lose-lock" and conn is not None:
        logging.getLogger(__name__).warning("EVENT_LAKE_FAULT=lose-lock: dropping the promote lock now")
        conn.close()
