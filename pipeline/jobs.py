"""Job history in ``<lake>.ops.jobs``: one row per job run, with its result and details."""

from __future__ import annotations

import json
import logging
import os
import socket
from datetime import datetime
from typing import Any

from pipeline import lake
from pipeline.config import Settings

log = logging.getLogger(__name__)


def record(settings: Settings, run_id: str, job: str, started: datetime, finished: datetime,
           status: str, error: str | None = None, details: dict[str, Any] | None = None) -> bool:
    """Append one history row; returns False (and logs) when the catalog cannot be reached,
    since failing to write history must never turn a job's result into a crash."""
    try:
        con = lake.connect(settings)
    except Exception as exc:  # PipelineError, or a driver error from a dying connection
        log.warning("could not record %s job history: %s", job, (str(exc).splitlines() or [""])[0])
        return False
    try:
        lake.ensure_tables(con, settings)
        con.execute("BEGIN")
        con.execute(f"CALL {settings.lake_name}.set_commit_message('event-lake', ?)",
                    [f"job {job} {status}"])
        con.execute(
            f"INSERT INTO {settings.lake_name}.{settings.ops_schema}.jobs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, job, started, finished, status, error,
             json.dumps(details or {}, default=str), f"{socket.gethostname()}:{os.getpid()}"])
        con.execute("COMMIT")
        return True
    except Exception as exc:  # history is best effort; the job's own outcome is already logged
        log.warning("could not record %s job history: %s", job, str(exc).splitlines()[0])
        return False
    finally:
        con.close()


def last_runs(con, settings: Settings) -> list[dict[str, Any]]:
    """The latest run of each job, newest first."""
    cursor = con.execute(
        f"SELECT job, status, started_at, finished_at, error, details "
        f"FROM {settings.lake_name}.{settings.ops_schema}.jobs "
        "QUALIFY row_number() OVER (PARTITION BY job ORDER BY finished_at DESC) = 1 "
        "ORDER BY finished_at DESC")
    columns = [c[0] for c in cursor.description]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
