"""No load waits forever for executors: a cluster whose only worker died leaves Spark waiting for
resources without end ("Initial job has not accepted any resources", in its own log only), while
the run said nothing and ``/healthz`` said 200 (483 s, until the worker came back).

While an extraction runs on a cluster (a ``spark://`` or ``k8s://`` master; local mode's driver is
its own executor, and a Connect server keeps its own), a watcher looks at the executors the driver
has registered every second. When none has been there for ``SPARK_EXECUTOR_WAIT``, it cancels the
job; the extraction then fails as temporary, naming the master and the wait.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING

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


class ExecutorWatch:
    """A context for one extraction: cancels its Spark jobs after ``wait`` without executors, and
    then, as the block ends, raises :class:`EngineUnavailable` in place of the cancellation."""

    def __init__(self, spark: SparkSession, master: str, wait: timedelta) -> None:
        self.spark, self.master, self.wait = spark, master, wait
        self.gave_up = False
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def watched(self) -> bool:
        return self.master.startswith(("spark://", "k8s://")) and self.wait.total_seconds() > 0

    def __enter__(self) -> ExecutorWatch:
        if self.watched:
            self._thread = threading.Thread(target=self._watch, name="executor-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self.gave_up:
            raise EngineUnavailable(
                f"No Spark executors registered at {self.master} for {format_duration(self.wait)}: the "
                "extraction was cancelled; nothing was staged or promoted.",
                "Check the cluster's workers (the master's page lists them) and that they can reach this "
                "driver; the next run reads the same window again. SPARK_EXECUTOR_WAIT sets how long a "
                "load waits for one.") from None

    def _watch(self) -> None:
        from pipeline.extract.spark_session import cancel_jobs

        since: float | None = None
        warned = False
        while not self._done.wait(LOOK_EVERY_SECONDS):
            try:
                count = registered_executors(self.spark)
            except Exception:  # noqa: BLE001  the JVM going away is the extraction's own error to tell
                return
            if count:
                since, warned = None, False
                continue
            now = time.monotonic()
            since = since if since is not None else now
            waited = now - since
            if not warned and waited >= min(10.0, self.wait.total_seconds() / 2):
                log.warning("waiting for Spark executors at %s (none registered for %.0fs; the load gives up "
                            "after %s)", self.master, waited, format_duration(self.wait))
                warned = True
            if waited >= self.wait.total_seconds():
                self.gave_up = True
                cancel_jobs(self.spark)
                return
