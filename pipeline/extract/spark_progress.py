"""Progress of a Spark write on the driver's terminal: rows the tasks report as they read
(:mod:`.task_reports`, the arrow reader), else tasks done of the running stages from the status
tracker, turned into an estimate of rows (the planner counted the window's rows)."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pipeline import progress
from pipeline.extract.spark_session import is_connect
from pipeline.extract.task_reports import ReportTo, RowsListener
from pipeline.progress import Progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
POLL_SECONDS = 0.5


@contextlib.contextmanager
def task_progress(spark: SparkSession, meter: Progress) -> Iterator[ReportTo | None]:
    """While the block runs, poll what the tasks did into ``meter`` (a classic session on a
    terminal only: a Connect client has no status tracker, and a pipe wants no progress).
    Yields where tasks may report their rows (None: nowhere, no progress is shown)."""
    if not progress.active() or is_connect(spark):
        yield None
        return
    with contextlib.ExitStack() as stack:
        listener = _listener(spark, stack)
        done = threading.Event()
        thread = threading.Thread(target=_poll, args=(spark, meter, listener, done), name="spark-progress",
                                  daemon=True)
        thread.start()
        try:
            yield listener.address if listener else None
        finally:
            done.set()
            thread.join(timeout=2)


def _listener(spark: SparkSession, stack: contextlib.ExitStack) -> RowsListener | None:
    """A listener on the driver's address, where the executors reach it (local mode: loopback)."""
    conf = spark.sparkContext.getConf()
    local = (conf.get("spark.master") or "local").startswith("local")
    host = "127.0.0.1" if local else (conf.get("spark.driver.host") or "127.0.0.1")
    try:
        return stack.enter_context(RowsListener(socket.gethostbyname(host)))
    except OSError as exc:  # progress is a nicety: the tracker's task counts remain
        log.debug("no task reports on %s (%s)", host, exc)
        return None


def _poll(spark: SparkSession, meter: Progress, listener: RowsListener | None, done: threading.Event) -> None:
    tracker = spark.sparkContext.statusTracker()
    while not done.wait(POLL_SECONDS):
        with contextlib.suppress(Exception):  # a stage may end between the two calls
            stages = [info for info in map(tracker.getStageInfo, tracker.getActiveStageIds())
                      if info is not None]
            total = sum(s.numTasks for s in stages)
            finished = sum(s.numCompletedTasks for s in stages)
            read = listener.rows if listener else None
            if read is not None:
                meter.update(read, f"tasks {finished}/{total}" if total else "")
            elif total:
                estimate = (meter.total or 0) * finished // total
                meter.update(estimate, f"~ tasks {finished}/{total}")
