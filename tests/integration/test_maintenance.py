"""Maintenance on demand: dry runs change nothing, time travel inside the retention survives,
compaction running alongside loads loses and doubles nothing."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from pipeline.lake import connect as lake
from pipeline.lake import maintain
from pipeline.settings.resolve import resolve
from tests.helpers import (
    add_events,
    assert_lake_equals_source,
    assert_promoted_by_mode,
    jobs_table,
    lake_query,
    run,
)


def _load_batches(settings, count: int, seed: int, spark=None) -> list[int]:
    """``count`` loads of 200 new events (dlt, or Spark when given a session)."""
    snapshots = []
    for i in range(count):
        add_events(settings, 200, seed=seed + i)
        snapshots += run(settings, engine="spark" if spark else "dlt", spark=spark).snapshots
    return snapshots


def _files(settings) -> list[str]:
    rows = lake_query(settings, "SELECT data_file FROM ducklake_list_files('lake', 'events')")
    return sorted(r[0] for r in rows)


def _json_head(stdout: str) -> dict:
    """--json output is one JSON document, nothing else (logs and the last line go to stderr)."""
    return json.loads(stdout)


def test_dry_run_reports_but_changes_nothing(settings, lake_env, cli):
    _load_batches(settings, 4, seed=30)
    snapshots_before = lake_query(settings, "SELECT snapshot_id FROM lake.snapshots()")
    files_before = _files(settings)
    result = cli("--maintain", "--dry-run", "--retention", "0s", "--json",
                     env=lake_env)
    assert result.returncode == 0, result.stderr
    report = _json_head(result.stdout)
    assert report["dry_run"] and len(report["snapshots_expired"]) >= 4
    assert report["files_before"] == 4 and report["files_after"] == 1
    assert result.stderr.strip().splitlines()[-1].startswith("Maintenance dry run done")
    assert lake_query(settings, "SELECT snapshot_id FROM lake.snapshots()") == snapshots_before
    assert _files(settings) == files_before


def test_time_travel_inside_the_retention_survives_maintenance(settings):
    old = _load_batches(settings, 3, seed=40)
    time.sleep(1.0)  # a gap between the old snapshots and the recent ones, for the cut-off below
    recent_start = time.monotonic()
    recent = _load_batches(settings, 3, seed=50)
    resolved = resolve(settings)
    counts = {v: lake_query(settings, f"SELECT count(*) FROM lake.main.events AT (VERSION => {v})")[0][0]
              for v in recent}
    # a retention reaching 0.5 s before the recent loads began (the cut-off is taken to the
    # microsecond): the old snapshots, 1 s before, fall outside it, the recent ones inside
    retention = timedelta(seconds=time.monotonic() - recent_start + 0.5)
    # nothing else reads this lake, so files may go as soon as they are unreferenced
    on_disk = sum(p.stat().st_size for p in Path(resolved.data_path).rglob("*.parquet"))
    report = maintain.run_maintenance(resolved, retention, delete_grace=timedelta(0))
    freed = on_disk - sum(p.stat().st_size for p in Path(resolved.data_path).rglob("*.parquet"))
    # the bytes reported are those the disk got back net of the merged files written (it said 0)
    assert report.bytes_deleted > 0 and report.bytes_deleted >= freed
    assert set(old) <= set(report.snapshots_expired)
    assert not set(recent) & set(report.snapshots_expired)
    assert report.files_after < report.files_before and report.files_deleted > 0
    # compaction's snapshots say who made them and why, like every other snapshot
    merged = lake_query(settings, "SELECT author, commit_message FROM lake.snapshots() "
                                  "WHERE changes::VARCHAR LIKE '%merge_adjacent%'")
    assert merged and all(a == "event-lake" and m.startswith("maintenance: merge") for a, m in merged), merged
    for version, count in counts.items():
        at_version = f"SELECT count(*) FROM lake.main.events AT (VERSION => {version})"
        assert lake_query(settings, at_version)[0][0] == count
    con = lake.connect(resolved, read_only=True)
    try:
        with pytest.raises(duckdb.Error, match="(?i)snapshot"):
            con.execute(f"SELECT count(*) FROM lake.main.events AT (VERSION => {old[0]})").fetchall()
    finally:
        con.close()
    assert_lake_equals_source(settings, expected_rows=1_200)


@pytest.mark.parametrize(("promotion", "engine"), [("copy", "dlt"), ("zero-copy", "spark")])
def test_compaction_while_loads_run_loses_and_doubles_nothing(settings, engine, request):
    """Zero-copy with Spark: the registered files are merged with DuckLake's own while loads
    keep registering more."""
    resolved = resolve(settings)
    spark = request.getfixturevalue("spark") if engine == "spark" else None
    _load_batches(settings, 2, seed=60, spark=spark)
    errors: list[BaseException] = []

    def loads() -> None:
        try:
            _load_batches(settings, 8, seed=70, spark=spark)
        except BaseException as exc:  # noqa: BLE001  surfaced below
            errors.append(exc)

    loader = threading.Thread(target=loads)
    loader.start()
    compactions = 0
    while loader.is_alive():
        maintain.run_maintenance(resolved, timedelta(seconds=0), steps=(maintain.Step.COMPACT,))
        compactions += 1
        loader.join(timeout=0.2)  # compactions between and during the loads, without spinning the CPU
    loader.join()
    assert not errors, errors
    assert compactions >= 2
    inserted = lake_query(settings, "SELECT sum(rows_inserted) FROM lake.ops.batches")[0][0]
    assert inserted == 2_000
    assert_lake_equals_source(settings, expected_rows=2_000)
    assert_promoted_by_mode(settings)


def test_status_json_shows_jobs_files_and_snapshots(settings, lake_env, cli):
    _load_batches(settings, 2, seed=80)
    assert cli("--maintain", "--retention", "7d", env=lake_env).returncode == 0
    result = cli("--status", "--json", env=lake_env)
    status = _json_head(result.stdout)
    assert status["data_files"] >= 1 and status["data_bytes"] > 0 and status["snapshot_count"] >= 3
    assert status["lake_rows"] == 400 and status["scheduler"] is None


def test_a_run_compacts_when_small_files_pile_up_not_only_by_the_calendar(settings, lake_env, cli):
    """A --run from cron each minute made ~10k files a week before the weekly compaction (a
    group-by ran 26x slower over them). Past COMPACT_FILES small files waiting to be merged, the
    run that adds one more compacts, recorded as a compaction; below it, no run does."""
    env = {**lake_env, "COMPACT_FILES": "3"}
    _load_batches(settings, 3, seed=60)  # 3 files in one day's folder: 2 waiting to be merged
    add_events(settings, 200, seed=63)
    quiet = cli("--run", "--engine", "dlt", env=env)  # now 3 waiting: this run compacts
    assert quiet.returncode == 0, quiet.stderr
    assert "3 small data files wait to be merged (COMPACT_FILES 3): compacting now" in quiet.stderr
    assert len(_files(settings)) == 1
    [(status, details)] = lake_query(settings, f"SELECT status, details FROM {jobs_table(settings)} "
                                               "WHERE job = 'compact'")
    compacted = json.loads(details)
    assert status == "success" and compacted["files_before"] > compacted["files_after"], compacted
    add_events(settings, 200, seed=64)
    below = cli("--run", "--engine", "dlt", env=env)
    assert below.returncode == 0 and "compacting now" not in below.stderr
    assert_lake_equals_source(settings, expected_rows=1_000)
