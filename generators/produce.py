"""Generate and COPY batches, in this process or spread over worker processes.

Each batch is generated from its own seed (``seed`` + batch number), so a seeded run
writes the same events whatever the worker count. Workers ignore SIGINT/SIGTERM: the
parent stops handing out batches and the batches in flight finish and commit.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing import get_context

import psycopg

from generators.events import EventFactory
from generators.writer import write_batch, write_linked


@dataclass(frozen=True)
class BatchJob:
    """One batch to write: how many events, from which seed, with which lateness."""

    rows: int
    seed: int | None
    late_fraction: float
    late_by: timedelta
    clock_skew: timedelta | None = None  # an application clock this far off stamps created_at
    sessions_table: str | None = None  # --sessions: ``rows`` sessions there, each with its events


def _linked(conn: psycopg.Connection, table: str, job: BatchJob, now: datetime) -> int:
    """``job.rows`` sessions and their events, committed together (generators.events.sessions)."""
    assert job.sessions_table is not None
    sessions, events = EventFactory(job.seed).sessions(job.rows, now, late_fraction=job.late_fraction,
                                                       late_by=job.late_by)
    return write_linked(conn, job.sessions_table, sessions, table, events)


def run_batch(conn: psycopg.Connection, table: str, job: BatchJob) -> int:
    now = datetime.now(UTC) + (job.clock_skew or timedelta(0))
    if job.sessions_table is not None:
        return _linked(conn, table, job, now)
    events = EventFactory(job.seed).batch(job.rows, now, late_fraction=job.late_fraction, late_by=job.late_by)
    if job.clock_skew is not None:  # said in the row, so a measurement can take it back out
        for event in events:
            event.details["clock_skew_s"] = job.clock_skew.total_seconds()
    return write_batch(conn, table, events, created_at=now if job.clock_skew is not None else None)


_worker_conn: psycopg.Connection | None = None
_worker_table = ""


def _worker_init(conninfo: str, table: str) -> None:
    global _worker_conn, _worker_table
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _worker_conn = psycopg.connect(conninfo)
    _worker_table = table


def _worker_batch(job: BatchJob) -> int:
    assert _worker_conn is not None
    return run_batch(_worker_conn, _worker_table, job)


class Producer:
    """Writes jobs with ``workers`` processes (1 = in this process, on ``conn``)."""

    def __init__(self, conn: psycopg.Connection, conninfo: str, table: str, workers: int) -> None:
        self.conn, self.table, self.workers = conn, table, workers
        self.pool: ProcessPoolExecutor | None = None
        if workers > 1:
            self.pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"),
                                            initializer=_worker_init, initargs=(conninfo, table))

    def write(self, jobs: Iterator[BatchJob], stopped,
              committed: Callable[[int], None] = lambda _: None) -> int:
        """Write jobs until they run out or ``stopped()``; returns rows committed.
        ``committed(total)`` is called after each batch commits (progress)."""
        total = 0
        if self.pool is None:
            for job in jobs:
                if stopped():
                    break
                total += run_batch(self.conn, self.table, job)
                committed(total)
            return total
        # At most one batch per worker is handed out: a queued batch would start after a stop
        # signal (the pool feeds its workers ahead), and only the batches in flight may finish.
        pending = set[Future]()
        for job in jobs:
            if stopped():
                break
            pending.add(self.pool.submit(_worker_batch, job))
            if len(pending) >= self.workers:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                total += sum(f.result() for f in done)
                committed(total)
        if stopped():  # only after a stop: a batch no worker has started yet is dropped
            for future in pending:
                future.cancel()
        done, _ = wait(pending)
        done = {f for f in done if not f.cancelled()}
        total += sum(f.result() for f in done)
        committed(total)
        return total

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
