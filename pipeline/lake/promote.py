"""Promotion: one staged batch -> one DuckLake transaction -> at most one snapshot.

Inside the transaction: deduplicate the batch on ``event_id`` (keeping the newest
``created_at``), drop rows the lake already holds in the batch's own time range (never a
scan of the whole lake), insert the rest, append the state row and set the commit message.
Promoters of one table are serialized by the ``promote`` lock (:mod:`.locks`).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb

from pipeline import faults, staging
from pipeline.lake import batches, locks
from pipeline.lake.connect import connect
from pipeline.lake.schema import ensure_tables
from pipeline.lake.transaction import transaction
from pipeline.settings import ResolvedSettings
from pipeline.staging import StagedBatch

log = logging.getLogger(__name__)

_STAGED_ROWS = """
    SELECT CAST(event_id AS UUID) AS event_id, CAST(event_type AS VARCHAR) AS event_type,
           CAST(event_timestamp AS TIMESTAMPTZ) AS event_timestamp,
           CAST(details AS JSON) AS details, CAST(created_at AS TIMESTAMPTZ) AS created_at
    FROM read_parquet($files)
"""


_KEEP_NEWEST = """
    QUALIFY row_number() OVER (PARTITION BY event_id
                               ORDER BY created_at DESC NULLS LAST, event_timestamp DESC) = 1
"""


def insert_sql(events_table: str, batch_has_duplicates: bool = True) -> str:
    """Insert the batch's new rows: dedup inside the batch (only when it has repeated ids: the
    window function costs a sort), anti-join the lake only within the batch's time range."""
    dedup = _KEEP_NEWEST if batch_has_duplicates else ""
    return f"""
    INSERT INTO {events_table} (event_id, event_type, event_timestamp, details, created_at)
    SELECT s.event_id, s.event_type, s.event_timestamp, s.details, s.created_at
    FROM ({_STAGED_ROWS} {dedup}) s
    ANTI JOIN (SELECT event_id FROM {events_table}
               WHERE event_timestamp BETWEEN $min_ts AND $max_ts) existing
           ON existing.event_id = s.event_id
    """


@dataclass(frozen=True)
class PromotionResult:
    batch_id: str
    rows_staged: int
    rows_inserted: int
    rows_duplicate: int
    snapshot_id: int | None
    seconds: float
    outcome: str  # "committed", "no new rows", "already promoted", "empty"
    max_event_timestamp: datetime | None = None  # the watermark this batch committed

    def describe(self) -> str:
        if self.outcome == "committed":
            return (f"batch {self.batch_id}: {self.rows_staged} staged, {self.rows_inserted} "
                    f"inserted, {self.rows_duplicate} duplicates -> snapshot {self.snapshot_id} "
                    f"({self.seconds:.2f}s)")
        return f"batch {self.batch_id}: {self.outcome} ({self.rows_staged} staged), no snapshot"


def promote(settings: ResolvedSettings, batch: StagedBatch,
            con: duckdb.DuckDBPyConnection | None = None) -> PromotionResult:
    """Promote one complete staged batch; remove its staging folder once it is settled.
    ``con`` (a session with the lake attached and its tables created) saves opening one."""
    started = time.monotonic()
    own = con is None
    with locks.hold(settings, "promote"):
        if con is None:
            con = connect(settings)
            ensure_tables(con, settings)
        try:
            result = _promote_locked(con, settings, batch, started)
        finally:
            if own:
                con.close()
    staging.remove_batch(batch.folder)
    log.info("%s", result.describe())
    return result


def _promote_locked(con: duckdb.DuckDBPyConnection, settings: ResolvedSettings, batch: StagedBatch,
                    started: float) -> PromotionResult:
    manifest = batch.manifest
    files = batch.file_uris()

    def result(outcome: str, staged: int = 0, inserted: int = 0, snapshot: int | None = None,
               max_ts: datetime | None = None) -> PromotionResult:
        return PromotionResult(batch.batch_id, staged, inserted, staged - inserted, snapshot,
                               time.monotonic() - started, outcome, max_ts)

    if batches.is_recorded(con, settings, batch.batch_id):
        return result("already promoted", manifest.row_count)
    if not staging.is_complete(batch.folder):
        return result("settled by another process", manifest.row_count)
    if not files:
        return result("empty")
    staged, distinct_ids, min_ts, max_ts = con.execute(
        "SELECT count(*), count(DISTINCT event_id), min(event_timestamp), max(event_timestamp) "
        "FROM read_parquet($files)", {"files": files}).fetchone()
    if staged == 0:
        return result("empty")

    message = f"promote batch {batch.batch_id} window {manifest.window.describe()}"
    extra = json.dumps({"batch_id": batch.batch_id, "engine": manifest.engine,
                        "window_low": manifest.window_low, "window_upper": manifest.window_upper,
                        "rows_staged": staged})
    with transaction(con, settings.lake_name, message, extra) as tx:
        inserted = con.execute(insert_sql(settings.events_table, distinct_ids < staged),
                               {"files": files, "min_ts": min_ts, "max_ts": max_ts}).fetchone()[0]
        if inserted == 0:
            tx.rollback()  # nothing new: leave the lake (and its snapshot list) alone
            return result("no new rows", staged)
        batches.record(con, settings, batches.BatchRecord(
            batch_id=batch.batch_id, table_name=settings.lake_table, engine=manifest.engine,
            window_low=manifest.window.low, window_upper=manifest.window.upper,
            rows_staged=staged, rows_inserted=inserted, rows_duplicate=staged - inserted,
            min_event_timestamp=min_ts, max_event_timestamp=max_ts,
            extract_seconds=manifest.extract_seconds, promote_seconds=time.monotonic() - started,
            staged_at=datetime.fromisoformat(manifest.created_at), promoted_at=datetime.now(UTC)))
        faults.maybe_crash(settings, "before-commit")
    snapshot = con.execute(
        f"SELECT max(snapshot_id) FROM {settings.lake_name}.snapshots() "
        "WHERE json_extract_string(commit_extra_info, '$.batch_id') = ?", [batch.batch_id]
    ).fetchone()[0]
    return result("committed", staged, inserted, snapshot, max_ts)
