"""Zero-copy promotion: Spark's files join the lake as they are, in DuckLake's own day folders,
and every premise that fails sends the batch down the copy path instead of into the lake twice."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

from pipeline import staging
from pipeline.lake import maintain, zero_copy
from pipeline.lake.promote import promote
from pipeline.ops.run import run
from pipeline.settings import load_settings
from pipeline.settings.resolve import resolve
from tests.conftest import COPY_MODE
from tests.helpers import add_events, assert_lake_equals_source, files_registered, lake_query

DAY = timedelta(days=1)


def _lake_files(settings) -> list[str]:
    return sorted(r[0] for r in lake_query(settings, "SELECT data_file FROM ducklake_list_files('lake', 'events')"))


def test_spark_files_are_registered_in_the_day_folders_then_compacted_like_any_other(settings, spark):
    add_events(settings, 1_500, seed=1, late_by=2 * DAY)  # three event days: three day folders
    add_events(settings, 1_500, seed=2, late_by=DAY)
    add_events(settings, 1_500, seed=3)
    report = run(settings, spark=spark)
    assert report.rows_inserted == 4_500 and len(report.snapshots) == 1
    files = _lake_files(settings)
    assert files_registered(settings) == len(files) >= 3
    data = Path(resolve(settings).data_path)
    for path in files:  # DuckLake's own layout, so its compactor can merge them
        relative = Path(path).relative_to(data / "main" / "events")
        assert [p.split("=")[0] for p in relative.parts[:3]] == ["year", "month", "day"], path
        assert relative.name.startswith(report.staged_batch), path
    assert lake_query(settings, "SELECT DISTINCT typeof(event_id), typeof(details) FROM lake.main.events") == \
        [("VARCHAR", "VARCHAR")]
    # a day filter prunes by the partition values DuckLake read from the folder names
    newest_day = lake_query(settings, "SELECT max(event_timestamp)::DATE FROM lake.main.events")[0][0]
    assert lake_query(settings, "SELECT count(*) FROM lake.main.events WHERE event_timestamp::DATE = ?",
                      [newest_day])[0][0] > 0

    add_events(settings, 300, seed=4)  # a second batch into the newest day: two files to merge there
    run(settings, spark=spark)
    before = len(_lake_files(settings))
    result = maintain.run_maintenance(resolve(settings), timedelta(0), steps=("compact",))
    assert len(_lake_files(settings)) < before, result
    assert_lake_equals_source(settings, expected_rows=4_800)


def test_a_batch_whose_ids_the_lake_took_meanwhile_is_promoted_by_copy(settings, lake_env, spark):
    """Run A writes its files; run B (another process) loads the same rows first; A's files must
    not be registered on top of them."""
    add_events(settings, 1_000, seed=5)
    run(settings, mode="extract", spark=spark)
    resolved = resolve(settings)
    [batch] = staging.complete_batches(staging.table_dir(resolved))
    assert batch.lake_files
    paths = [Path(str(f["uri"])) for f in batch.lake_files]
    run(load_settings(lake_env), engine="dlt", mode="extract")  # B stages the same window...
    [_, other] = staging.complete_batches(staging.table_dir(resolved))
    promote(resolved, other)  # ...and commits first
    result = promote(resolved, batch)
    assert (result.rows_inserted, result.rows_duplicate) == (0, 1_000)
    assert files_registered(settings) == 0
    assert not any(p.exists() for p in paths)  # never registered, so removed at once
    assert_lake_equals_source(settings, expected_rows=1_000)


def test_orphans_of_a_crash_are_removed_and_files_a_staged_batch_waits_for_are_kept(settings, spark):
    add_events(settings, 800, seed=6)
    run(settings, mode="extract", spark=spark)  # staged, not promoted: its lake files wait
    resolved = resolve(settings)
    [batch] = staging.complete_batches(staging.table_dir(resolved))
    waiting = [Path(str(f["uri"])) for f in batch.lake_files]
    orphan = waiting[0].with_name("20200101T000000000000Z-deadbeef-00000.parquet")  # a crash's leftover
    orphan.write_bytes(waiting[0].read_bytes())
    old = time.time() - 2 * maintain.ORPHAN_GRACE.total_seconds()
    for path in [*waiting, orphan]:
        os.utime(path, (old, old))
    report = maintain.run_maintenance(resolved, timedelta(0), steps=("compact",))
    assert not orphan.exists() and report.files_deleted == 1
    assert all(p.exists() for p in waiting)
    run(settings, mode="promote")
    assert_lake_equals_source(settings, expected_rows=800)


@COPY_MODE
def test_a_lake_made_in_copy_mode_keeps_uuid_ids_and_zero_copy_runs_copy_into_it(settings, lake_env, spark,
                                                                                 caplog):
    add_events(settings, 500, seed=7)
    run(settings, spark=spark)
    zero = load_settings({**lake_env, "PROMOTION": "zero-copy"})
    add_events(zero, 200, seed=8)
    with caplog.at_level("INFO"):
        report = run(zero, spark=spark)
    assert report.rows_inserted == 200
    assert "zero-copy promotion not used (this lake was made in copy mode (event_id UUID, details JSON)" \
        in caplog.text
    assert lake_query(zero, "SELECT DISTINCT typeof(event_id), typeof(details) FROM lake.main.events") == \
        [("UUID", "JSON")]
    assert files_registered(zero) == 0
    assert_lake_equals_source(zero, expected_rows=700)


def test_zero_copy_is_used_only_when_each_premise_holds():
    settings = load_settings({"EVENT_LAKE_HOME": "/tmp/x", "DUCKLAKE_DATA_PATH": "/tmp/x/data/"})
    text = {"event_id": "VARCHAR", "details": "VARCHAR"}
    typed_source = {"event_id": "uuid", "details": "jsonb"}
    assert zero_copy.blocker(settings, "spark", text, typed_source, True, {}) is None
    cases = {
        "dlt engine": zero_copy.blocker(settings, "dlt", text, typed_source, True, {}),
        "UUID lake": zero_copy.blocker(settings, "spark", {**text, "event_id": "UUID"}, typed_source, True, {}),
        "text ids": zero_copy.blocker(settings, "spark", text, {**typed_source, "event_id": "text"}, True, {}),
        "no unique": zero_copy.blocker(settings, "spark", text, typed_source, False, {}),
        "drift": zero_copy.blocker(settings, "spark", text, typed_source, True, {"region": "VARCHAR"}),
    }
    assert "dlt engine" in cases["dlt engine"]
    assert "event_id UUID" in cases["UUID lake"] and "PROMOTION=zero-copy" in cases["UUID lake"]
    assert "event_id is text" in cases["text ids"]
    assert "unique index on event_id" in cases["no unique"]
    assert "region" in cases["drift"]
