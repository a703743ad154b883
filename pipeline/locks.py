"""Cross-process locks: a Postgres advisory lock on the catalog database, or a file lock.

Promoters of one table, and each scheduled job, take a named lock so that two processes
(even on two machines sharing a Postgres catalog) never do the same work at once. The lock
dies with its holder: a killed process can never leave the lake locked.
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

from pipeline.config import Settings
from pipeline.errors import CatalogUnavailable, LockBusy, TerminalError, looks_transient
from pipeline.pgdsn import scrub_secrets


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_lock`` from a readable name."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def lock_name(settings: Settings, job: str) -> str:
    return f"event-lake:{settings.lake_name}:{settings.lake_table}:{job}"


@contextmanager
def hold(settings: Settings, job: str, *, timeout: float | None = None) -> Iterator[None]:
    """Hold the lock for ``job`` on this lake; wait up to ``timeout`` s (None = forever).

    Raises :class:`LockBusy` when the wait runs out.
    """
    name = lock_name(settings, job)
    catalog = settings.catalog
    if catalog is not None and catalog.pg is not None:
        with _advisory(catalog.pg.conninfo(), name, timeout, catalog.describe()):
            yield
    else:
        base = catalog.path if catalog is not None and catalog.path else settings.home / "catalog"
        path = Path(f"{base}.{job}.lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = fasteners.InterProcessLock(str(path))
        if not lock.acquire(blocking=True, timeout=timeout):
            raise LockBusy(f"Another process holds the {job} lock ({path}).")
        try:
            yield
        finally:
            lock.release()


@contextmanager
def _advisory(conninfo: str, name: str, timeout: float | None, where: str) -> Iterator[None]:
    key = lock_key(name)
    try:
        conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        message = (f"Cannot reach the catalog ({where}) to take the {name} lock: "
                   f"{scrub_secrets(str(exc)).strip()}")
        if looks_transient(str(exc)):
            raise CatalogUnavailable(message, "Check that the catalog Postgres runs.") from None
        raise TerminalError(message, "Check DUCKLAKE_CATALOG (host, port, dbname, user, password).") from None
    with conn:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
            if deadline is not None and time.monotonic() >= deadline:
                raise LockBusy(f"Another process holds the {name} lock.",
                               "It will be released when that process finishes or dies.")
            time.sleep(0.2)
        try:
            yield
        finally:
            # If the connection died (catalog restarted, network cut), the server has already
            # released the session lock; an unlock error must not mask the caller's outcome.
            with contextlib.suppress(psycopg.Error):
                if not conn.closed:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
