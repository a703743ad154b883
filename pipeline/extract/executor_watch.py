"""No load waits forever: a cluster whose only worker died leaves Spark waiting for resources
without end ("Initial job has not accepted any resources", in its own log only), while the run said
nothing and ``/healthz`` said 200 (483 s, until the worker came back).

While an extraction runs, a watcher looks every second at two bounds:

- on a cluster (a ``spark://`` or ``k8s://`` master; local mode's driver is its own executor, and a
  Connect server keeps its own), the executors the driver has registered: when none has been there
  for ``SPARK_EXECUTOR_WAIT``, the job is cancelled. While it waits, the process's ``/healthz``
  says so (:mod:`pipeline.waiting`);
- anywhere, the extraction's own length: past ``LOAD_TIMEOUT`` the job is cancelled (a read stuck
  behind a lock, a task that never returns).

Either way the extraction then fails as temporary, naming the bound and what to check.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING

from pipeline import waiting
from pipeline.errors import EngineUnavailable
from pipeline.settings.durations import format_duration

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
LOOK_EVERY_SECONDS = 1.0


def registered_executors(spark: SparkSession) -> int:
    """Executors the driver has now, itself not counted."""
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()  # the driver's block manager too
    return max(0, int(status.size()) - 1)


class ExtractionWatch:
    """A context for one extraction: cancels its Spark jobs after ``executor_wait`` without
    executors or ``timeout`` in all (zero: no such bound), and then, as the block ends, raises
    :class:`EngineUnavailable` in place of the cancellation."""

    def __init__(self, spark: SparkSession, master: str, executor_wait: timedelta,
                 timeout: timedelta = timedelta(0)) -> None:
        self.spark, self.master = spark, master
        self.executor_wait, self.timeout = executor_wait, timeout
        self.gave_up: EngineUnavailable | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def watches_executors(self) -> bool:
        return self.master.startswith(("spark://", "k8s://")) and self.executor_wait.total_seconds() > 0

    def __enter__(self) -> ExtractionWatch:
        if self.watches_executors or self.timeout.total_seconds() > 0:
            self._thread = threading.Thread(target=self._watch, name="extraction-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self.gave_up is not None:
            raise self.gave_up from None

    def _watch(self) -> None:
        started = time.monotonic()
        with contextlib.ExitStack() as wait:  # the registered wait for executors, while there is one
            since: float | None = None  # when the executors were first seen gone
            warned = False
            while not self._done.wait(LOOK_EVERY_SECONDS):
                now = time.monotonic()
                if self.timeout.total_seconds() > 0 and now - started >= self.timeout.total_seconds():
                    self._give_up(self._timed_out())
                    return
                if not self.watches_executors:
                    continue
                try:
                    count = registered_executors(self.spark)
                except Exception:  # noqa: BLE001  the JVM going away is the extraction's own error to tell
                    return
                if count:
                    if warned:
                        log.info("Spark executors at %s are back (%d)", self.master, count)
                    since, warned = None, False
                    wait.close()
                    continue
                if since is None:
                    since = now
                    wait.enter_context(waiting.waiting_for(f"Spark executors at {self.master}", since,
                                                           self.executor_wait))
                waited = now - since
                if not warned and waited >= min(10.0, self.executor_wait.total_seconds() / 2):
                    log.warning("waiting for Spark executors at %s (none registered for %.0fs; the "
                                "load gives up after %s)", self.master, waited,
                                format_duration(self.executor_wait))
                    warned = True
                if waited >= self.executor_wait.total_seconds():
                    waiting.give_up(f"Spark executors at {self.master}")  # unhealthy until recorded
                    self._give_up(self._no_executors())
                    return

    def _give_up(self, error: EngineUnavailable) -> None:
        from pipeline.extract.spark_session import cancel_jobs

        self.gave_up = error
        cancel_jobs(self.spark)

    def _no_executors(self) -> EngineUnavailable:
        return EngineUnavailable(
            f"No Spark executors registered at {self.master} for {format_duration(self.executor_wait)}: "
            "the extraction was cancelled; nothing was staged or promoted.",
            "Check the cluster's workers (the master's page lists them) and that they can reach this "
            "driver; the next run reads the same window again. SPARK_EXECUTOR_WAIT sets how long a "
            "load waits for one.")

    def _timed_out(self) -> EngineUnavailable:
        return EngineUnavailable(
            f"The extraction ran past LOAD_TIMEOUT ({format_duration(self.timeout)}) on {self.master}: it "
            "was cancelled; nothing was staged or promoted.",
            "Look for a read stuck in the source (pg_stat_activity: a lock it waits on) or a stalled "
            "Spark task (its log); the next run reads the same window again. A first load of a very "
            "large table may need a larger LOAD_TIMEOUT (0: no bound).")
