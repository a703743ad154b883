"""Progress of a Spark write from the driver's status tracker: tasks done of the running
stages, turned into an estimate of rows (the planner counted the window's rows)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pipeline import progress
from pipeline.extract.spark_session import is_connect
from pipeline.progress import Progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

POLL_SECONDS = 0.5


@contextlib.contextmanager
def task_progress(spark: SparkSession, meter: Progress) -> Iterator[None]:
    """While the block runs, poll the stages' tasks into ``meter`` (a classic session on a
    terminal only: a Connect client has no status tracker, and a pipe wants no progress)."""
    if not progress.active() or is_connect(spark):
        yield
        return
    done = threading.Event()
    thread = threading.Thread(target=_poll, args=(spark, meter, done), name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=2)


def _poll(spark: SparkSession, meter: Progress, done: threading.Event) -> None:
    tracker = spark.sparkContext.statusTracker()
    while not done.wait(POLL_SECONDS):
        with contextlib.suppress(Exception):  # a stage may end between the two calls
            stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            stages = [s for s in stages if s is not None]
            total = sum(s.numTasks for s in stages)
            finished = sum(s.numCompletedTasks for s in stages)
            if total:
                estimate = (meter.total or 0) * finished // total
                meter.update(estimate, f"~ tasks {finished}/{total}")
