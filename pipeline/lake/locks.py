"""Cross-process locks: a Postgres advisory lock on the catalog database, or a file lock.

Every lock the product takes is named here, per lake and table:

* ``promote`` — promoters of one table are serialized, so two runs never insert one event twice;
* ``attach`` / ``setup`` — the first ATTACH and the first table creation of a lake;
* ``job:<name>`` — each scheduled job (load, expire, compact), taken with ``timeout=0`` so a
  second scheduler skips a job another process is running.

Two processes, even on two machines sharing a Postgres catalog, never do the same work at
once. The lock dies with its holder: a killed process can never leave the lake locked.
The other side of that: a holder whose lock connection died has lost the lock while it still
works, so before committing it checks its :class:`Lease` (fencing) and rolls back if lost.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import fasteners
import psycopg

from pipeline.errors import CatalogUnavailable, LockBusy, service_error
from pipeline.settings import ResolvedSettings, Settings


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_lock`` from a readable name."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def lock_name(settings: Settings, job: str) -> str:
    return f"event-lake:{settings.lake_name}:{settings.lake_table}:{job}"


class Lease:
    """Proof of holding a lock; :meth:`check` before committing work done under it."""

    def __init__(self, name: str, conn: psycopg.Connection | None = None) -> None:
        self.name, self.conn = name, conn

    def check(self) -> None:
        """Raise :class:`CatalogUnavailable` if the lock was lost (its connection died, so the
        server released it and another process may hold it now)."""
        if self.conn is None:
            return  # a file lock lives in this process: it cannot be lost while we run
        try:
            self.conn.execute("SELECT 1")
        except psycopg.Error:
            raise CatalogUnavailable(
                f"Lost the {self.name} lock (its connection to the catalog died); the work done "
                "under it was rolled back, since another process may hold the lock now.",
                "Nothing to fix if the catalog is back: the next run redoes it.") from None


@contextmanager
def hold(settings: ResolvedSettings, job: str, *, timeout: float | None = None) -> Iterator[Lease]:
    """Hold the lock for ``job`` on this lake; wait up to ``timeout`` s (None = forever).

    Raises :class:`LockBusy` when the wait runs out.
    """
    name = lock_name(settings, job)
    catalog = settings.catalog
    if catalog.pg is not None:
        with _advisory(catalog.pg.conninfo(), name, timeout, catalog.describe()) as lease:
            yield lease
    else:
        # file catalogs serve one machine: a lock file beside the catalog file
        path = Path(f"{catalog.path}.{job}.lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = fasteners.InterProcessLock(str(path))
        if not lock.acquire(blocking=True, timeout=timeout):
            raise LockBusy(f"Another process holds the {job} lock ({path}).")
        try:
            yield Lease(name)
        finally:
            lock.release()


@contextmanager
def _advisory(conninfo: str, name: str, timeout: float | None, where: str) -> Iterator[Lease]:
    key = lock_key(name)
    try:
        conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise service_error(exc, f"Cannot reach the catalog (DUCKLAKE_CATALOG={where}) to take the "
                            f"{name} lock", unavailable=CatalogUnavailable,
                            transient_hint="Check that the catalog Postgres runs and DUCKLAKE_CATALOG "
                            "points at it.",
                            terminal_hint="Check DUCKLAKE_CATALOG (host, port, dbname, user, password).",
                            ) from None
    with conn:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
            if deadline is not None and time.monotonic() >= deadline:
                raise LockBusy(f"Another process holds the {name} lock.",
                               "It will be released when that process finishes or dies.")
            time.sleep(0.2)
        try:
            yield Lease(name, conn)
        finally:
            # If the connection died (catalog restarted, network cut), the server has already
            # released the session lock; an unlock error must not mask the caller's outcome.
            with contextlib.suppress(psycopg.Error):
                if not conn.closed:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
