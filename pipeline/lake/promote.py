"""Promotion: one staged batch -> one DuckLake transaction -> at most one snapshot.

Inside the transaction: quarantine the rows that cannot be loaded (:mod:`.validate`),
deduplicate the rest on ``event_id`` (keeping the newest ``created_at``), drop rows the lake
already holds in the batch's own time range (never a scan of the whole lake), insert the
rest, append the state row and set the commit message.
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
from pipeline.lake import batches, locks, validate
from pipeline.lake.connect import connect
from pipeline.lake.schema import ensure_tables
from pipeline.lake.transaction import transaction
from pipeline.settings import ResolvedSettings
from pipeline.sqltext import quote_ident
from pipeline.staging import StagedBatch

log = logging.getLogger(__name__)
RECONCILE_ENGINE = "reconcile"  # the manifest engine of backfill batches (pipeline.ops.reconcile)


def insert_sql(events_table: str, batch_has_duplicates: bool = True,
               extra_columns: dict[str, str] | None = None) -> str:
    """Insert the batch's new loadable rows: one per id (only when the batch repeats ids: the
    window function costs a sort), anti-joined with the lake only within the batch's time range."""
    extras = "".join(f", {quote_ident(name)}" for name in extra_columns or {})
    picked = "".join(f", s.{quote_ident(name)}" for name in extra_columns or {})
    return f"""
    INSERT INTO {events_table} (event_id, event_type, event_timestamp, details, created_at{extras})
    SELECT s.event_id, s.event_type, s.event_timestamp, s.details, s.created_at{picked}
    FROM ({validate.loadable_sql(batch_has_duplicates, extra_columns=extra_columns)}) s
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
    rows_quarantined: int = 0  # newly quarantined (a bad row the look-back re-reads counts once)

    def describe(self) -> str:
        if self.outcome == "committed":
            quarantined = f", {self.rows_quarantined} quarantined" if self.rows_quarantined else ""
            return (f"batch {self.batch_id}: {self.rows_staged} staged, {self.rows_inserted} "
                    f"inserted, {self.rows_duplicate} duplicates{quarantined} -> snapshot "
                    f"{self.snapshot_id} ({self.seconds:.2f}s)")
        return f"batch {self.batch_id}: {self.outcome} ({self.rows_staged} staged), no snapshot"


def promote(settings: ResolvedSettings, batch: StagedBatch,
            con: duckdb.DuckDBPyConnection | None = None) -> PromotionResult:
    """Promote one complete staged batch; remove its staging folder once it is settled.
    ``con`` (a session with the lake attached and its tables created) saves opening one."""
    started = time.monotonic()
    own = con is None
    with locks.hold(settings, "promote") as lease:
        if con is None:
            con = connect(settings)
            ensure_tables(con, settings)
        try:
            result = _promote_locked(con, settings, batch, started, lease)
        finally:
            if own:
                con.close()
    staging.remove_batch(batch.folder)
    log.info("%s", result.describe())
    return result


def _promote_locked(con: duckdb.DuckDBPyConnection, settings: ResolvedSettings, batch: StagedBatch,
                    started: float, lease: locks.Lease) -> PromotionResult:
    manifest = batch.manifest
    files = batch.file_uris()

    def result(outcome: str, staged: int = 0, inserted: int = 0, snapshot: int | None = None,
               max_ts: datetime | None = None, quarantined: int = 0) -> PromotionResult:
        return PromotionResult(batch.batch_id, staged, inserted, staged - inserted - quarantined, snapshot,
                               time.monotonic() - started, outcome, max_ts, quarantined)

    if batches.is_recorded(con, settings, batch.batch_id):
        return result("already promoted", manifest.row_count)
    if not staging.is_complete(batch.folder):
        return result("settled by another process", manifest.row_count)
    if not files:
        return result("empty")
    staged, loadable, distinct_ids, min_ts, max_ts, invalid = con.execute(
        validate.BATCH_STATS, {"files": files}).fetchone()
    if staged == 0:
        return result("empty")
    has_duplicates = distinct_ids < loadable

    message = (f"reconcile batch {batch.batch_id}: backfill late events in {manifest.window.describe()}"
               if manifest.engine == RECONCILE_ENGINE else
               f"promote batch {batch.batch_id} window {manifest.window.describe()}")
    extra = json.dumps({"batch_id": batch.batch_id, "engine": manifest.engine,
                        "window_low": manifest.window_low, "window_upper": manifest.window_upper,
                        "rows_staged": staged})
    with transaction(con, settings.lake_name, message, extra) as tx:
        quarantined = 0
        rejected = validate.rejected_sql(invalid > 0, has_duplicates)
        if rejected is not None:
            quarantined = con.execute(validate.quarantine_sql(settings.quarantine_table, rejected),
                                      {"files": files, "batch_id": batch.batch_id,
                                       "table_name": settings.lake_table}).fetchone()[0]
        extras = add_columns(con, settings, manifest.extra_columns or {})
        inserted = 0
        if loadable:
            inserted = con.execute(insert_sql(settings.events_table, has_duplicates, extras),
                                   {"files": files, "min_ts": min_ts, "max_ts": max_ts}).fetchone()[0]
        if inserted == 0 and quarantined == 0:
            tx.rollback()  # nothing new: leave the lake (and its snapshot list) alone
            return result("no new rows", staged)
        batches.record(con, settings, batches.BatchRecord(
            batch_id=batch.batch_id, table_name=settings.lake_table, engine=manifest.engine,
            window_low=manifest.window.low, window_upper=manifest.window.upper,
            rows_staged=staged, rows_inserted=inserted, rows_duplicate=staged - inserted - quarantined,
            min_event_timestamp=min_ts, max_event_timestamp=max_ts,
            extract_seconds=manifest.extract_seconds, promote_seconds=time.monotonic() - started,
            staged_at=datetime.fromisoformat(manifest.created_at), promoted_at=datetime.now(UTC)))
        faults.maybe_crash(settings, "before-commit")
        faults.maybe_lose_lock(settings, lease)
        lease.check()  # fencing: commit only while still holding the promote lock
    snapshot = con.execute(
        f"SELECT max(snapshot_id) FROM {settings.lake_name}.snapshots() "
        "WHERE json_extract_string(commit_extra_info, '$.batch_id') = ?", [batch.batch_id]
    ).fetchone()[0]
    return result("committed", staged, inserted, snapshot, max_ts, quarantined)


def add_columns(con: duckdb.DuckDBPyConnection, settings: ResolvedSettings,
                extra_columns: dict[str, str]) -> dict[str, str]:
    """Schema drift: add the columns the source gained to the lake table, inside the batch's
    transaction (the new columns and the first rows carrying them are one snapshot). Returns
    each column with the type the lake holds it in (an existing column keeps its type)."""
    if not extra_columns:
        return {}
    existing = dict(con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = ? "
        "AND schema_name = 'main' AND table_name = ?", [settings.lake_name, settings.lake_table]).fetchall())
    for name, kind in extra_columns.items():
        if name not in existing:
            log.info("schema drift: adding column %s %s to %s", name, kind, settings.events_table)
            con.execute(f"ALTER TABLE {settings.events_table} ADD COLUMN {quote_ident(name)} {kind}")
    return {name: existing.get(name, kind) for name, kind in extra_columns.items()}
