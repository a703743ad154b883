"""Cross-process locks: a Postgres advisory lock on the catalog database, or a file lock.

Every lock the product takes is named here. A table's (:func:`table_lock`):

* ``promote`` — promoters of one table are serialized, so two runs never insert one event twice;
* ``setup`` — the first creation of a table.

The lake's (:func:`lake_lock`, :func:`hold`), whatever tables a process lists, in whatever order:

* ``attach`` — the first ATTACH of a lake;
* ``job:<name>`` — each scheduled job (load, expire, compact, reconcile), taken with ``timeout=0``
  so a second scheduler skips a job another process is running. A job of the lake, never of the
  table a process lists first: two schedulers listing the same tables in another order ran loads
  at once when it was.

Two processes, even on two machines sharing a Postgres catalog, never do the same work at
once. The lock dies with its holder: a killed process can never leave the lake locked.
The other side of that: a holder whose lock connection died has lost the lock while it still
works, so before committing it checks its :class:`Lease` (fencing) and rolls back if lost.

"Dies with its holder" needs the server to notice. A connection cut by the network (not closed
by a process that ended) can live on in the server as a *ghost* session, holding its lock, for
as long as the server's TCP keepalive takes (two hours by default): a process whose lock
connection was cut that way then waited for its own lock forever. So lock connections ask the
server to probe them within seconds (keepalive settings of the session), carry this process's
name (``event-lake <host> <pid>``), and a wait that finds the lock held by a session of this
very process that none of its live connections is, ends that ghost. A wait says, once, who
holds the lock it waits for.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import fasteners

from pipeline.errors import CatalogUnavailable, LockBusy, service_error
from pipeline.settings import ResolvedSettings
from pipeline.settings.catalog import CatalogSpec
from pipeline.settings.pgdsn import PgDsn
from pipeline.sqltext import one_row

if TYPE_CHECKING:  # psycopg is imported where a lock is taken: a read-only --sql session never takes one
    import psycopg

log = logging.getLogger(__name__)

# the server drops a lock connection it no longer hears from after ~10 + 3 × 5 s
KEEPALIVE = {"tcp_keepalives_idle": 10, "tcp_keepalives_interval": 5, "tcp_keepalives_count": 3}
SAY_WHO_AFTER_SECONDS = 5.0  # a wait this long says who holds the lock
GHOST_CHECK_SECONDS = 2.0
_live_backends: set[int] = set()  # server pids of this process's open lock connections
_live_lock = threading.Lock()


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_lock`` from a readable name."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def table_lock(lake_name: str, table: str, job: str) -> str:
    """The lock for ``job`` on one table of one lake."""
    return f"event-lake:{lake_name}:{table}:{job}"


def lake_lock(lake_name: str, job: str) -> str:
    """The lock for ``job`` on the whole lake (its tables are in no name: one lake, one lock)."""
    return f"event-lake:{lake_name}:*:{job}"


class Lease:
    """Proof of holding a lock; :meth:`check` before committing work done under it."""

    def __init__(self, name: str, conn: psycopg.Connection | None = None) -> None:
        self.name, self.conn = name, conn

    def check(self) -> None:
        """Raise :class:`CatalogUnavailable` if the lock was lost (its connection died, so the
        server released it and another process may hold it now)."""
        if self.conn is None:
            return  # a file lock lives in this process: it cannot be lost while we run
        import psycopg

        try:
            self.conn.execute("SELECT 1")
        except psycopg.Error:
            raise CatalogUnavailable(
                f"Lost the {self.name} lock (its connection to the catalog died); the work done "
                "under it was rolled back, since another process may hold the lock now.",
                "Nothing to fix if the catalog is back: the next run redoes it.") from None


@contextmanager
def hold(settings: ResolvedSettings, job: str, *, timeout: float | None = None) -> Iterator[Lease]:
    """Hold the lake's lock for ``job`` (:func:`lake_lock`); wait up to ``timeout`` s (None = forever).

    Raises :class:`LockBusy` when the wait runs out.
    """
    with hold_named(settings.catalog, lake_lock(settings.lake_name, job), job, timeout=timeout) as lease:
        yield lease


@contextmanager
def hold_named(catalog: CatalogSpec, name: str, job: str, *, timeout: float | None = None) -> Iterator[Lease]:
    """Hold lock ``name`` (:func:`table_lock`, :func:`lake_lock`) in ``catalog``: its Postgres, or a
    lock file beside it."""
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
    import psycopg

    key = lock_key(name)
    try:
        app, options = _session_params(conninfo)
        conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=10, application_name=app,
                               options=options)
    except psycopg.OperationalError as exc:
        raise service_error(exc, f"Cannot reach the catalog (DUCKLAKE_CATALOG={where}) to take the "
                            f"{name} lock", unavailable=CatalogUnavailable,
                            transient_hint="Check that the catalog Postgres runs and DUCKLAKE_CATALOG "
                            "points at it.",
                            terminal_hint="Check DUCKLAKE_CATALOG (host, port, dbname, user, password).",
                            ) from None
    backend = conn.info.backend_pid
    with _live_lock:
        _live_backends.add(backend)  # before the lock is tried: a live holder is never a ghost
    try:
        with conn:
            _wait_for(conn, key, name, timeout)
            try:
                yield Lease(name, conn)
            finally:
                # If the connection died (catalog restarted, network cut), the server has already
                # released the session lock; an unlock error must not mask the caller's outcome.
                with contextlib.suppress(psycopg.Error):
                    if not conn.closed:
                        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    finally:
        with _live_lock:
            _live_backends.discard(backend)


def _wait_for(conn: psycopg.Connection, key: int, name: str, timeout: float | None) -> None:
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    said, checked = False, started
    while not one_row(conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)))[0]:
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise LockBusy(f"Another process holds the {name} lock.",
                           "It will be released when that process finishes or dies.")
        if now - checked >= GHOST_CHECK_SECONDS or (not said and now - started >= SAY_WHO_AFTER_SECONDS):
            checked = now
            holder = _holder(conn, key)
            if holder is not None and _is_own_ghost(holder):
                log.warning("the %s lock is held by a session of this process whose connection was cut "
                            "(server pid %s, %s since %s): ending it", name, holder["pid"], holder["state"],
                            holder["state_change"])
                conn.execute("SELECT pg_terminate_backend(%s)", (holder["pid"],))
                continue
            if holder is not None and not said and now - started >= SAY_WHO_AFTER_SECONDS:
                said = True
                log.warning("waiting for the %s lock, held by %s (server pid %s, %s since %s)", name,
                            holder["application_name"] or "a session without a name", holder["pid"],
                            holder["state"], holder["state_change"])
        time.sleep(0.2)


def _holder(conn: psycopg.Connection, key: int) -> dict | None:
    """The session holding advisory lock ``key`` (pg_locks splits the 64-bit key in two oids)."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    row = conn.execute(
        "SELECT a.pid, a.application_name, a.state, a.state_change FROM pg_locks l "
        "JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' AND l.granted "
        "AND l.classid = %s::oid AND l.objid = %s::oid AND l.objsubid = 1 AND l.database = "
        "(SELECT oid FROM pg_database WHERE datname = current_database())",
        (unsigned >> 32, unsigned & 0xFFFF_FFFF)).fetchone()
    if row is None:
        return None
    return dict(zip(("pid", "application_name", "state", "state_change"), row, strict=True))


def _is_own_ghost(holder: dict) -> bool:
    """A session named for this process that is none of its open lock connections."""
    with _live_lock:
        live = set(_live_backends)
    return holder["application_name"] == application_name() and holder["pid"] not in live


def application_name() -> str:
    return f"event-lake {socket.gethostname()} {os.getpid()}"[:63]


def _session_params(conninfo: str) -> tuple[str, str]:
    """This process's name, and the server-side keepalives added to any ``options`` the DSN has."""
    options = PgDsn.parse(conninfo, "DUCKLAKE_CATALOG").params.get("options") or ""
    keepalive = " ".join(f"-c {k}={v}" for k, v in KEEPALIVE.items())
    return application_name(), f"{options} {keepalive}".strip()
