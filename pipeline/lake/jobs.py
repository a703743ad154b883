"""Job history: one row per job run, with its result and details.

It lives in the catalog database beside DuckLake's own tables (``event_lake_jobs`` in the
lake's metadata schema), not in a lake table: every insert into a lake table commits a
snapshot, and recording no-op runs, skipped ticks and maintenance made the lake's snapshot
list grow by one per run (5 promotions made 22 snapshots). A lake whose history is still in
its old ``ops.jobs`` table has it copied over on the first record; that table is left as it
was (dropping it would be a snapshot too).
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TypedDict

import duckdb

from pipeline import logs
from pipeline.errors import LakeNotCreated, first_line, is_transient, scrub_secrets
from pipeline.lake.connect import lake_session
from pipeline.lake.session import Lake
from pipeline.logs import process_name
from pipeline.process import stop_signal
from pipeline.settings import ResolvedSettings
from pipeline.sqltext import one_row

log = logging.getLogger(__name__)


class JobStatus(StrEnum):
    """How one run of a job ended, as the history's ``status`` column and the metrics' label say."""

    SUCCESS = "success"
    FAILED = "failed"
    SKIPPED = "skipped"  # another process ran the job (its lock was held)
    CANCELLED = "cancelled"  # stopped by a shutdown


@dataclass(frozen=True)
class JobRecord:
    """One run of a job, as the history keeps it: the scheduler's runs and manual ones alike."""

    job: str
    started: datetime
    finished: datetime
    status: JobStatus
    error: str | None = None
    details: Mapping[str, object] | None = None
    run_id: str = field(default_factory=lambda: logs.RUN_ID)  # the process that ran it

    def row(self) -> list[object]:
        return [self.run_id, self.job, self.started, self.finished, self.status, self.error,
                json.dumps(self.details or {}, default=str), process_name()]


class ManualRun:
    """What a manual run of a job says about itself while it runs: its details for the history,
    and why it did not succeed if it finished without raising (a batch set aside)."""

    def __init__(self) -> None:
        self.details: dict[str, object] = {"manual": True}
        self.failed: str | None = None

    def update(self, details: Mapping[str, object] | None = None, **more: object) -> None:
        self.details.update(details or {}, **more)

    def fail(self, reason: str) -> None:
        self.failed = reason


class JobHistory:
    """The job history of the lake the settings name (a table in its catalog database)."""

    def __init__(self, settings: ResolvedSettings) -> None:
        self.settings = settings

    def write(self, record: JobRecord, lake: Lake | None = None) -> bool:
        """Append one history row (through ``lake``, the job's own open session, else a session of
        its own — also when the job's session failed, as a lost catalog connection does); returns
        False (and logs) when the catalog cannot be reached, since failing to write history must
        never turn a job's result into a crash."""
        row = record.row()

        def insert(into: Lake) -> None:
            into.execute(f"INSERT INTO {ensure_table(into)} VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)

        if lake is not None:
            with contextlib.suppress(Exception):
                insert(lake)
                return True
        try:
            # not tables=True: a run that failed because the lake's tables or data folder could not
            # be made (a refused data path) is recorded all the same, in the catalog's job history
            with lake_session(self.settings) as own:
                insert(own)
            return True
        except Exception as exc:  # noqa: BLE001  a catalog away, a dying connection: the job's outcome is logged already
            away = is_transient(exc)
            log.warning("could not record the %s job in the history: %s", record.job,
                        "the catalog is away; it is written once it answers again" if away
                        else first_line(scrub_secrets(str(exc))))
            return False

    def record_failure(self, job: str, began: datetime, error: str) -> None:
        """Record a manual run that failed before it opened the lake (a refused data folder), in a
        lake that exists: one not created yet stays uncreated (its catalog unbound to any data path)."""
        try:
            with lake_session(self.settings, read_only=True):
                pass
        except LakeNotCreated:
            return
        except Exception:  # noqa: BLE001  the catalog away: the failure is reported all the same
            return
        self.write(JobRecord(job, began, datetime.now(UTC), JobStatus.FAILED, error))

    @contextmanager
    def recorded(self, job: str | None, lake: Lake | None = None) -> Iterator[ManualRun]:
        """Record the block as one manual run of ``job`` (None: record nothing): ``failed`` with the
        error's first line if it raises, or with the reason the block gave :meth:`ManualRun.fail`
        (it finished but did not succeed: a batch was set aside), else ``success`` with the details.
        (The scheduler writes its own runs: it also has skipped and cancelled.)"""
        run = ManualRun()
        began = datetime.now(UTC)
        try:
            yield run
        except BaseException as exc:
            if job:
                sig = stop_signal()
                if sig is not None:  # an operator's stop, not a failure (what it cancelled failed first)
                    self.write(JobRecord(job, began, datetime.now(UTC), JobStatus.CANCELLED,
                                         f"stopped by {signal.Signals(sig).name}"), lake)
                elif isinstance(exc, Exception):
                    self.write(JobRecord(job, began, datetime.now(UTC), JobStatus.FAILED, first_line(exc)),
                               lake)
            raise
        if job:
            status = JobStatus.FAILED if run.failed else JobStatus.SUCCESS
            details = {**run.details, **({"failed": run.failed} if run.failed else {})}
            self.write(JobRecord(job, began, datetime.now(UTC), status, run.failed, details), lake)


TABLE = "event_lake_jobs"
COLUMNS = ("run_id VARCHAR, job VARCHAR, started_at TIMESTAMPTZ, finished_at TIMESTAMPTZ, status VARCHAR, "
           "error VARCHAR, details VARCHAR, host VARCHAR")


def _metadata_table(con: duckdb.DuckDBPyConnection) -> str:
    # the catalog's schema as attached by DuckLake (see pipeline.lake.connect: lake_metadata)
    return f"{one_row(con.execute('SELECT getvariable(?)', ['lake_metadata']))[0]}.{TABLE}"


def table_exists(con: duckdb.DuckDBPyConnection, qualified: str) -> bool:
    # duckdb_tables() does not list the tables of DuckLake's attached metadata database
    try:
        con.execute(f"SELECT 1 FROM {qualified} LIMIT 0")
        return True
    except duckdb.CatalogException:
        return False


def source(lake: Lake) -> str | None:
    """The table holding the history (the catalog's, else an old lake's ``ops.jobs``), or None."""
    for table in (_metadata_table(lake.con), lake.ops("jobs")):
        if table_exists(lake.con, table):
            return table
    return None


def ensure_table(lake: Lake) -> str:
    """The history table in the catalog database, made (and filled from ``ops.jobs``) if missing."""
    table = _metadata_table(lake.con)
    if table_exists(lake.con, table):
        return table
    with lake.lock_lake("setup"):  # two first records at once: one creates, one waits
        if not table_exists(lake.con, table):
            lake.execute(f"CREATE TABLE {table} ({COLUMNS})")
            legacy = lake.ops("jobs")
            if table_exists(lake.con, legacy):
                lake.execute(f"INSERT INTO {table} SELECT run_id, job, started_at, finished_at, status, "
                            f"error, CAST(details AS VARCHAR), host FROM {legacy}")
    return table


class JobRun(TypedDict):
    """One row of the job history, as :func:`last_runs` reads it."""

    job: str
    status: str
    started_at: datetime
    finished_at: datetime
    error: str | None
    details: str | None  # JSON


def last_runs(lake: Lake) -> list[JobRun]:
    """The latest run of each job, newest first."""
    table = source(lake)
    if table is None:
        return []
    # as instants whatever the catalog keeps them as (a SQLite catalog's timestamps come back as text)
    rows = lake.execute("SELECT job, status, CAST(started_at AS TIMESTAMPTZ), "
                        f"CAST(finished_at AS TIMESTAMPTZ), error, details FROM {table} "
                        "QUALIFY row_number() OVER (PARTITION BY job ORDER BY finished_at DESC) = 1 "
                        "ORDER BY finished_at DESC").fetchall()
    return [JobRun(job=job, status=status, started_at=started, finished_at=finished, error=error,
                   details=details) for job, status, started, finished, error, details in rows]


def last_success(lake: Lake, job: str, table: str | None = None) -> datetime | None:
    """When ``job`` last finished successfully (a scheduled or a manual run); ``table``: a run that
    listed that lake table among those it loads (a record that lists none, written by an older
    version, counts for every table)."""
    history = source(lake)
    if history is None:
        return None
    tables = "CASE WHEN json_valid(details) THEN json_extract(details, '$.tables') END"
    listed = "" if table is None else (
        f" AND ({tables} IS NULL OR list_contains(TRY_CAST({tables} AS VARCHAR[]), ?))")
    return one_row(lake.execute(f"SELECT max(CAST(finished_at AS TIMESTAMPTZ)) FROM {history} "
                                f"WHERE job = ? AND status = 'success'{listed}",
                                [job] if table is None else [job, table]))[0]
