"""``--status``: where the pipeline stands (watermark, lag, last batches, snapshots)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pipeline import jobs, lake, source, staging, state
from pipeline.config import Settings
from pipeline.scheduler import read_state
from pipeline.window import iso


def collect(settings: Settings) -> dict[str, Any]:
    """Status as plain data (settings must be resolved)."""
    con = lake.connect(settings, read_only=True)
    try:
        tables = lake.table_names(con, settings)
        has_tables = (settings.ops_schema, "batches") in tables
        watermark = state.watermark(con, settings) if has_tables else None
        batches = state.recent_batches(con, settings, 5) if has_tables else []
        lake_rows = con.execute(f"SELECT count(*) FROM {settings.events_table}").fetchone()[0] \
            if has_tables else 0
        snapshots, latest = con.execute(
            f"SELECT count(*), max(snapshot_id) FROM {settings.lake_name}.snapshots()").fetchone()
        files, size = con.execute(
            "SELECT coalesce(sum(file_count), 0), coalesce(sum(file_size_bytes), 0) "
            "FROM ducklake_table_info(?)", [settings.lake_name]).fetchone()
        job_runs = jobs.last_runs(con, settings) if (settings.ops_schema, "jobs") in tables else []
    finally:
        con.close()
    with source.connect(settings.source_dsn) as conn:
        exists = source.table_exists(conn, settings.source_table)
        newest, pending = (None, 0)
        if exists:
            newest, pending = conn.execute(
                f"SELECT max(event_timestamp), count(*) FILTER (WHERE %(wm)s::timestamptz IS NULL "
                f"OR event_timestamp > %(wm)s) FROM {_quoted(settings.source_table)}",
                {"wm": watermark}).fetchone()
    lag = (newest - watermark).total_seconds() if newest and watermark else None
    return {
        "lake": settings.events_table,
        "catalog": settings.catalog.describe() if settings.catalog else None,
        "data_path": settings.data_path,
        "watermark": iso(watermark) if watermark else None,
        "source_newest_event": iso(newest) if newest else None,
        "lag_seconds": lag,
        "source_rows_after_watermark": pending,
        "lake_rows": lake_rows,
        "snapshot_count": snapshots,
        "latest_snapshot": latest,
        "data_files": int(files),
        "data_bytes": int(size),
        "staged_batches_waiting": len(staging.complete_batches(settings.staging_table_dir)),
        "jobs": {r["job"]: {"status": r["status"], "started_at": iso(r["started_at"]),
                            "finished_at": iso(r["finished_at"]), "error": r["error"]}
                 for r in job_runs},
        "scheduler": read_state(settings),
        "last_batches": [{k: iso(v) if isinstance(v, datetime) else v for k, v in b.items()}
                         for b in batches],
    }


def _quoted(qualified: str) -> str:
    return ".".join(f'"{p}"' for p in qualified.split("."))


def render(status: dict[str, Any]) -> str:
    lag = status["lag_seconds"]
    lines = [
        f"lake            {status['lake']}  ({status['lake_rows']} rows, "
        f"{status['snapshot_count']} snapshots, latest {status['latest_snapshot']})",
        f"catalog         {status['catalog']}",
        f"data path       {status['data_path']}",
        f"watermark       {status['watermark'] or 'none (nothing promoted yet)'}",
        f"source newest   {status['source_newest_event'] or '-'}",
        f"lag             {f'{lag:.0f}s' if lag is not None else '-'}; "
        f"{status['source_rows_after_watermark']} source rows after the watermark",
        f"data files      {status['data_files']} ({status['data_bytes']:,} bytes)",
        f"staged, waiting {status['staged_batches_waiting']} batch(es)",
        "last batches:",
    ]
    for b in status["last_batches"] or []:
        lines.append(f"  {b['batch_id']}  {b['engine']:5}  staged {b['rows_staged']:>8}  "
                     f"inserted {b['rows_inserted']:>8}  dup {b['rows_duplicate']:>6}  "
                     f"at {b['promoted_at']}")
    if not status["last_batches"]:
        lines.append("  (none)")
    scheduler = status["scheduler"] or {}
    lines.append("jobs:" + ("" if scheduler else "  (no scheduler running)"))
    for name in ("load", "expire", "compact"):
        last = status["jobs"].get(name)
        planned = scheduler.get("jobs", {}).get(name, {})
        result = (f"last {last['status']} at {last['finished_at']}"
                  + (f" ({last['error']})" if last["error"] else "")) if last else "never run"
        nxt = f"; next {planned['next_run']}" if planned.get("next_run") else ""
        lines.append(f"  {name:8} {result}{nxt}")
    return "\n".join(lines)
