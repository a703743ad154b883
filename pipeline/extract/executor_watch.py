"""No load waits forever: a cluster whose only worker died leaves Spark waiting for resources
without end ("Initial job has not accepted any resources", in its own log only), while the run said
nothing and ``/healthz`` said 200 (483 s, until the worker came back; 7 min 52 s under Spark
Connect, where the worker died while its executor ran the load's tasks).

While an extraction runs, a watcher looks every second at two bounds:

- on a cluster, whether any executor can run the job's tasks; when none could for
  ``SPARK_EXECUTOR_WAIT``, the job is cancelled. While it waits, the process's ``/healthz``
  says so (:mod:`pipeline.waiting`). A classic driver counts the executors it has registered
  (a ``spark://`` or ``k8s://`` master; local mode's driver is its own executor). A Spark Connect
  client has no such count: it reads the server's progress reports of the running operation
  (every 2 s), and an unfinished stage with no task in flight is a job nothing runs;
- anywhere, the extraction's own length: past ``LOAD_TIMEOUT`` the job is cancelled (a read stuck
  behind a lock, a task that never returns).

Either way the extraction then fails as temporary, naming the bound, where, and what to check.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, cast

from pipeline import waiting
from pipeline.errors import EngineUnavailable, scrub_secrets
from pipeline.settings.durations import format_duration

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.shell.progress import ProgressHandler, StageInfo

    from pipeline.settings.model import SparkOptions

log = logging.getLogger(__name__)
LOOK_EVERY_SECONDS = 1.0


class Executors(Protocol):
    """Whether anything can run the job's tasks now, as one kind of session can tell."""

    where: str  # the cluster, as an operator finds it: "spark://host:7077"

    def none(self) -> bool:
        """True while no executor can run the job's tasks (raises when the session is gone)."""
        ...

    def close(self) -> None: ...


def registered_executors(spark: SparkSession) -> int:
    """Executors the driver has now, itself not counted."""
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()  # the driver's block manager too
    return max(0, int(status.size()) - 1)


class RegisteredExecutors:
    """A classic driver's own count of the executors registered with it."""

    def __init__(self, spark: SparkSession, master: str) -> None:
        self.spark, self.where = spark, master

    def none(self) -> bool:
        return registered_executors(self.spark) == 0

    def close(self) -> None:
        pass


class ConnectTasks:
    """A Spark Connect server's progress reports of the running operation, taken as they come
    (the client calls this handler from the thread that reads the operation's results). A worker
    lost with its executors leaves the stage unfinished and no task in flight; so does a job
    that never got an executor."""

    def __init__(self, spark: SparkSession, remote: str) -> None:
        self.spark = spark
        self.where = connect_cluster(spark, remote)
        self._starved = False
        # a handler is any callable of this shape: the ABC is not imported for its name alone
        spark.registerProgressHandler(cast("ProgressHandler", self))

    def __call__(self, stages: Iterable[StageInfo] | None, inflight_tasks: int,
                 operation_id: str | None, done: bool) -> None:
        unfinished = any(not stage.done for stage in stages or ())
        self._starved = not done and unfinished and inflight_tasks == 0

    def none(self) -> bool:
        return self._starved

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.spark.removeProgressHandler(cast("ProgressHandler", self))


def connect_cluster(spark: SparkSession, remote: str) -> str:
    """The cluster behind a Connect server, named for an operator: its master and the server."""
    server = f"the Spark Connect server {scrub_secrets(remote)}"
    try:
        master = spark.conf.get("spark.master")
    except Exception:  # noqa: BLE001  a server that does not say: the server alone names it
        return server
    return f"{master} through {server}" if master else server


class ExtractionWatch:
    """A context for one extraction: cancels its Spark jobs after ``options.executor_wait`` without
    executors or ``options.load_timeout`` in all (zero: no such bound), and then, as the block
    ends, raises :class:`EngineUnavailable` in place of the cancellation."""

    def __init__(self, spark: SparkSession, options: SparkOptions) -> None:
        self.spark, self.options = spark, options
        self.gave_up: EngineUnavailable | None = None
        self._executors: Executors | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def watches_executors(self) -> bool:
        on_cluster = bool(self.options.remote) or self.options.master.startswith(("spark://", "k8s://"))
        return on_cluster and self.options.executor_wait.total_seconds() > 0

    def __enter__(self) -> ExtractionWatch:
        if self.watches_executors:
            remote = self.options.remote
            self._executors = (ConnectTasks(self.spark, remote) if remote
                               else RegisteredExecutors(self.spark, self.options.master))
        if self._executors is not None or self.options.load_timeout.total_seconds() > 0:
            self._thread = threading.Thread(target=self._watch, name="extraction-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self._executors is not None:
            self._executors.close()
        if self.gave_up is not None:
            raise self.gave_up from None

    def _watch(self) -> None:
        started = time.monotonic()
        executors = self._executors
        executor_wait, timeout = self.options.executor_wait, self.options.load_timeout.total_seconds()
        with contextlib.ExitStack() as wait:  # the registered wait for executors, while there is one
            since: float | None = None  # when the executors were first seen gone
            warned = False
            while not self._done.wait(LOOK_EVERY_SECONDS):
                now = time.monotonic()
                if timeout > 0 and now - started >= timeout:
                    self._give_up(self._timed_out())
                    return
                if executors is None:
                    continue
                try:
                    starved = executors.none()
                except Exception:  # noqa: BLE001  the JVM going away is the extraction's own error to tell
                    return
                if not starved:
                    if warned:
                        log.info("Spark executors at %s run the load again", executors.where)
                    since, warned = None, False
                    wait.close()
                    continue
                if since is None:
                    since = now
                    wait.enter_context(waiting.waiting_for(f"Spark executors at {executors.where}", since,
                                                           executor_wait))
                waited = now - since
                if not warned and waited >= min(10.0, executor_wait.total_seconds() / 2):
                    log.warning("waiting for Spark executors at %s: none to run the load's tasks for "
                                "%.0fs; the load gives up after %s", executors.where, waited,
                                format_duration(executor_wait))
                    warned = True
                if waited >= executor_wait.total_seconds():
                    waiting.give_up(f"Spark executors at {executors.where}")  # unhealthy until recorded
                    self._give_up(self._no_executors(executors.where))
                    return

    def _give_up(self, error: EngineUnavailable) -> None:
        from pipeline.extract.spark_session import cancel_jobs

        self.gave_up = error
        cancel_jobs(self.spark)

    def _no_executors(self, where: str) -> EngineUnavailable:
        return EngineUnavailable(
            f"No Spark executors for {format_duration(self.options.executor_wait)} at {where}: the "
            "extraction was cancelled; nothing was staged or promoted.",
            "Check the cluster's workers (the master's page lists them) and that they can reach the "
            "driver; the next run reads the same window again. SPARK_EXECUTOR_WAIT sets how long a "
            "load waits for one.")

    def _timed_out(self) -> EngineUnavailable:
        return EngineUnavailable(
            f"The extraction ran past LOAD_TIMEOUT ({format_duration(self.options.load_timeout)}) on "
            f"{self.options.shown}: it was cancelled; nothing was staged or promoted.",
            "Look for a read stuck in the source (pg_stat_activity: a lock it waits on) or a stalled "
            "Spark task (its log); the next run reads the same window again. A first load of a very "
            "large table may need a larger LOAD_TIMEOUT (0: no bound).")
