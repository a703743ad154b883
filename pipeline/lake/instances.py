"""One DuckDB instance per attached lake per process, shared by that process's lake sessions.

Opening a lake in a new DuckDB instance costs ~0.2 s: loading ``postgres_scanner`` and
``ducklake`` (the first load in a process checks each one's signature, hashing ~40 MB:
:func:`pipeline.lake.extensions.new_instance`), the ATTACH, and DuckLake's first read of its
catalog. A run opens the lake for its load and its job
record, a scheduler for every job, the dashboard for every page and ``/metrics`` for every
scrape; with one instance per lake they pay that once per process. A session is a cursor of the
instance: its own transaction, settings and variables, over the instance's extensions, secrets
and attached lake (DuckLake reads the catalog's latest snapshot at each transaction, so a
long-lived attach sees other processes' loads, new columns and dropped tables).

A session that fails drops its instance from the pool, so the next one attaches anew — a lost
catalog, or a lake changed under it, never outlives the session that met it. A dropped instance
is closed once its last session ends (closing it closes its cursors, which another thread may
still use).

Each :class:`pipeline.ops.pipeline.Pipeline` pools in a :class:`Pool` of its own (closed with it);
code outside a pipeline uses the process's shared pool.

Only sessions that can share are pooled (:func:`pipeline.lake.connect.lake_session` decides): a
``--sql`` session locks its instance's configuration and a time-travel session pins a snapshot,
so they open instances of their own.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import duckdb

log = logging.getLogger(__name__)

@dataclass(eq=False)
class _Instance:
    root: duckdb.DuckDBPyConnection
    sessions: int = 0
    dropped: bool = False
    invalidated: bool = False  # a fatal error: never closed (see _abandon)


# Instances a fatal DuckDB error invalidated, and their sessions, kept for the process's life. An
# INTERNAL error in any session (DuckDB 1.5.5 raised "Attempted to access index 0 within vector of
# size 0" in a scheduler's first compaction) invalidates the whole instance; closing a session of it
# that holds an open DuckLake transaction then rolls that back from a destructor, which throws, and
# C++ aborts the process (exit 134: every other job of a scheduler with it). Kept, and their
# reference counts raised so that neither a collection nor the interpreter's exit destroys them:
# the job that met the error fails with it, and the next session attaches a new instance.
_ABANDONED: list[duckdb.DuckDBPyConnection] = []


_lock = threading.Lock()  # guards every pool and each instance's counters (cursor() included)


class Pool:
    """Pooled instances, one per lake. The process has a shared pool; a
    :class:`pipeline.ops.pipeline.Pipeline` has one of its own (:func:`using`), so closing it closes
    its own attaches only — another pipeline's sessions in the same process stay open."""

    def __init__(self) -> None:
        self._pool: dict[Hashable, _Instance] = {}

    @contextmanager
    def session(self, key: Hashable, open_instance: Callable[[], duckdb.DuckDBPyConnection],
                alive: Callable[[duckdb.DuckDBPyConnection], object]) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of the instance pooled under ``key`` (made by ``open_instance`` if there is none
        yet), closed after the block; the instance is dropped if the block raises. A pooled instance
        must pass ``alive`` first (one round trip to what it attached); one that fails is replaced by
        a new attach, so a session meets a lost catalog as a failed attach, as it always did."""
        key = (os.getpid(), key)  # a forked child never uses its parent's instances
        instance, fresh = self._checked_out(key, open_instance)
        con = self._cursor(instance, key)
        if not fresh:
            try:
                alive(con)
            except duckdb.Error:
                self._release(key, instance, con, failed=True)
                instance, _ = self._checked_out(key, open_instance)
                con = self._cursor(instance, key)
        failed = True
        try:
            yield con
            failed = False
        finally:
            self._release(key, instance, con, failed)

    def drop_all(self) -> None:
        """Forget every instance of this pool (each closed as its last session ends): the next
        sessions attach anew."""
        with _lock:
            for key, instance in list(self._pool.items()):
                self._drop(key, instance)
                _close_if_done(instance)

    def _checked_out(self, key: Hashable, open_instance: Callable[[], duckdb.DuckDBPyConnection]
                     ) -> tuple[_Instance, bool]:
        """The pooled instance, counted as in use, and whether it was attached just now."""
        with _lock:
            instance = self._pool.get(key)
            if instance is not None:
                instance.sessions += 1
                return instance, False
        root = open_instance()  # outside the lock: attaching talks to the catalog, maybe for seconds
        with _lock:
            instance = self._pool.get(key)
            if instance is None:
                instance = self._pool[key] = _Instance(root)
            else:  # another thread attached the same lake meanwhile: use that one
                root.close()
            instance.sessions += 1
            return instance, True

    def _cursor(self, instance: _Instance, key: Hashable) -> duckdb.DuckDBPyConnection:
        try:
            with _lock:
                return instance.root.cursor()
        except BaseException:
            self._release(key, instance, None, failed=True)
            raise

    def _release(self, key: Hashable, instance: _Instance, con: duckdb.DuckDBPyConnection | None,
                 failed: bool) -> None:
        if failed and not instance.invalidated and _invalidated(instance):
            log.error("a fatal DuckDB error invalidated this process's instance of the lake; it is set "
                      "aside, never closed (closing it would abort the process), and the next session "
                      "attaches anew (docs/troubleshooting.md#duckdb-fatal-errors)")
        if con is not None:
            if instance.invalidated:
                _abandon(con)
            else:
                con.close()  # an open transaction rolls back
        with _lock:
            instance.sessions -= 1
            if failed:
                self._drop(key, instance)
            _close_if_done(instance)

    def _drop(self, key: Hashable, instance: _Instance) -> None:
        instance.dropped = True
        if self._pool.get(key) is instance:
            del self._pool[key]


def _close_if_done(instance: _Instance) -> None:
    if instance.dropped and instance.sessions == 0:
        if instance.invalidated:  # closing its root closes its sessions: abandoned too
            _abandon(instance.root)
        else:
            instance.root.close()


def _invalidated(instance: _Instance) -> bool:
    """Did a fatal error invalidate the instance? Asked of its root connection, which no session
    uses; remembered on the instance."""
    with _lock:
        instance.invalidated = instance.invalidated or _fatal(instance.root)
        return instance.invalidated


def _fatal(con: duckdb.DuckDBPyConnection) -> bool:
    """Does every statement of ``con``'s instance now fail as FATAL (a fatal error invalidated it)?"""
    try:
        con.execute("SELECT 1").fetchall()
    except duckdb.FatalException:
        return True
    except duckdb.Error:  # closed, interrupted, an aborted transaction: not fatal
        pass
    return False


@contextmanager
def owned(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """``con``, an instance of its own (not pooled), closed after the block — unless a fatal error
    invalidated it there: then abandoned (:data:`_ABANDONED`), as closing it could abort the process."""
    try:
        yield con
    except BaseException:
        if _fatal(con):
            log.error("a fatal DuckDB error invalidated a lake instance; it is set aside, never closed "
                      "(closing it would abort the process) (docs/troubleshooting.md#duckdb-fatal-errors)")
            _abandon(con)
        else:
            con.close()
        raise
    con.close()


def _abandon(con: duckdb.DuckDBPyConnection) -> None:
    """Keep ``con`` for good (:data:`_ABANDONED`): never closed, never destroyed."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(con))
    _ABANDONED.append(con)


SHARED = Pool()
_current: ContextVar[Pool] = ContextVar("lake_pool", default=SHARED)


def current() -> Pool:
    """The pool of the pipeline whose operation runs in this context, else the process's shared one."""
    return _current.get()


@contextmanager
def using(pool: Pool) -> Iterator[Pool]:
    """Lake sessions opened inside the block (in this thread) come from ``pool``."""
    token = _current.set(pool)
    try:
        yield pool
    finally:
        _current.reset(token)


def session(key: Hashable, open_instance: Callable[[], duckdb.DuckDBPyConnection],
            alive: Callable[[duckdb.DuckDBPyConnection], object]
            ) -> AbstractContextManager[duckdb.DuckDBPyConnection]:
    """:meth:`Pool.session` of the :func:`current` pool."""
    return current().session(key, open_instance, alive)


def drop_all() -> None:
    """Forget every instance of the :func:`current` pool: the next sessions attach anew. For
    callers that changed what an attach sees, such as tests dropping databases."""
    current().drop_all()
