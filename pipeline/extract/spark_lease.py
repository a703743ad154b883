"""Who owns a Spark session: each holder (a :class:`pipeline.ops.pipeline.Pipeline`, doctor) takes a
lease, and stops only what it started.

Classic Spark allows one SparkContext (one driver JVM) per process. The first lease starts it;
another lease taken while it runs gets a session of its own on it (``newSession``: its own SQL
settings and temporary views), and so does a lease taken in a process whose context someone else
started (a notebook's own ``SparkSession``). The context is stopped when the last lease ends, and
only if a lease started it: two pipelines in one process used to share one session, and closing one
stopped it under the other (``'NoneType' object has no attribute 'sc'``). Under Spark Connect each
lease is a server session of its own, ended with it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import TYPE_CHECKING

from pipeline.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_lock = threading.Lock()
_holders = 0  # classic leases alive in this process
_started_here = False  # a lease started the running SparkContext (so the last one stops it)


class SparkLease:
    """One holder's Spark session (:attr:`session`), until :meth:`release`."""

    def __init__(self, session: SparkSession, *, connect: bool) -> None:
        self.session = session
        self._connect = connect
        self._released = False

    @classmethod
    def take(cls, settings: Settings, app_name: str, *, long_lived: bool = False) -> SparkLease:
        """A session for ``settings`` (see :func:`pipeline.extract.spark_session.build_session`)."""
        global _holders, _started_here
        from pipeline.extract.spark_session import build_session, own_session

        if settings.spark.remote:  # a server session of its own, whoever else holds one
            return cls(build_session(settings, app_name, long_lived=long_lived, fresh=True), connect=True)
        with _lock:
            shared = _running_context()
            session = own_session(shared) if shared is not None else \
                build_session(settings, app_name, long_lived=long_lived)
            if shared is None:
                _started_here = True
            _holders += 1
        return cls(session, connect=False)

    def release(self) -> None:
        """End this lease: a Connect session ends; the SparkContext stops when this was the last
        lease and a lease started it (never one someone else started)."""
        global _holders, _started_here
        if self._released:
            return
        self._released = True
        if self._connect:
            with contextlib.suppress(Exception):  # the server may be gone: nothing left to end
                self.session.stop()
            return
        with _lock:
            _holders -= 1
            if _holders > 0 or not _started_here:
                return
            _started_here = False
            with contextlib.suppress(Exception):  # the JVM may already be gone (a lost driver)
                self.session.stop()


def _running_context():  # -> SparkContext | None
    """The process's SparkContext when one runs and still answers; a dead one (its JVM gone) is
    stopped, so the caller starts a new one."""
    global _started_here
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return None
    try:
        if not context._jsc.sc().isStopped():
            return context
    except Exception:  # noqa: BLE001  the JVM does not answer: the context is dead
        log.info("the process's Spark context no longer answers; starting a new one")
    with contextlib.suppress(Exception):
        context.stop()
    _started_here = False
    return None
