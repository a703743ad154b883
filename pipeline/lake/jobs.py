"""Job history in ``<lake>.ops.jobs``: one row per job run, with its result and details."""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import duckdb

from pipeline.errors import first_line
from pipeline.lake.connect import connect
from pipeline.lake.schema import ensure_tables
from pipeline.lake.transaction import transaction
from pipeline.settings import ResolvedSettings, Settings

log = logging.getLogger(__name__)


def record(settings: ResolvedSettings, run_id: str, job: str, started: datetime, finished: datetime,
           status: str, error: str | None = None, details: dict[str, Any] | None = None) -> bool:
    """Append one history row; returns False (and logs) when the catalog cannot be reached,
    since failing to write history must never turn a job's result into a crash."""
    try:
        con = connect(settings)
    except Exception as exc:  # PipelineError, or a driver error from a dying connection
        log.warning("could not record %s job history: %s", job, first_line(exc))
        return False
    try:
        ensure_tables(con, settings)
        with transaction(con, settings.lake_name, f"job {job} {status}"):
            con.execute(
                f"INSERT INTO {settings.jobs_table} VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, job, started, finished, status, error,
                 json.dumps(details or {}, default=str), f"{socket.gethostname()}:{os.getpid()}"])
        return True
    except Exception as exc:  # history is best effort; the job's own outcome is already logged
        log.warning("could not record %s job history: %s", job, first_line(exc))
        return False
    finally:
        con.close()


@contextmanager
def recorded(settings: ResolvedSettings, job: str | None) -> Iterator[dict[str, Any]]:
    """Record the block as one manual run of ``job`` (None: record nothing): ``failed`` with the
    error's first line if it raises, else ``success`` with the details the block put in the
    yielded dict. (The scheduler records its own runs: it also has skipped and cancelled.)"""
    from pipeline import logs

    details: dict[str, Any] = {"manual": True}
    began = datetime.now(UTC)
    try:
        yield details
    except Exception as exc:
        if job:
            record(settings, logs.RUN_ID, job, began, datetime.now(UTC), "failed", first_line(exc))
        raise
    if job:
        record(settings, logs.RUN_ID, job, began, datetime.now(UTC), "success", None, details)


def last_runs(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[dict[str, Any]]:
    """The latest run of each job, newest first."""
    cursor = con.execute(
        f"SELECT job, status, started_at, finished_at, error, details FROM {settings.jobs_table} "
        "QUALIFY row_number() OVER (PARTITION BY job ORDER BY finished_at DESC) = 1 "
        "ORDER BY finished_at DESC")
    columns = [c[0] for c in cursor.description]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def last_success(con: duckdb.DuckDBPyConnection, settings: Settings, job: str) -> datetime | None:
    """When ``job`` last finished successfully (a scheduled or a manual run)."""
    return con.execute(f"SELECT max(finished_at) FROM {settings.jobs_table} "
                       "WHERE job = ? AND status = 'success'", [job]).fetchone()[0]
