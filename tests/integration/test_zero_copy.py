"""Zero-copy promotion: Spark's files join the lake as they are, in DuckLake's own day folders,
and every premise that fails sends the batch down the copy path instead of into the lake twice."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

from pipeline import staging
from pipeline.lake import maintain
from pipeline.settings import load_settings
from pipeline.settings.resolve import resolve
from tests.conftest import COPY_MODE, NEEDS_JDBC_JAR, jdbc_jar
from tests.helpers import (
    add_events,
    assert_lake_equals_source,
    commit_infos,
    files_registered,
    lake_query,
    promote_batch,
    run,
    staging_folder,
)

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
        assert relative.name.startswith(report.tables["events"].staged_batch), path
    # the arrow reader writes Parquet's UUID and JSON types: the lake keeps the source's types
    assert lake_query(settings, "SELECT DISTINCT typeof(event_id), typeof(details) FROM lake.main.events") == \
        [("UUID", "JSON")]
    assert lake_query(settings, "SELECT count(*) FROM lake.main.events WHERE details->>'$.page' IS NOT NULL "
                      "OR details IS NOT NULL")[0][0] == 4_500
    # a day filter prunes by the partition values DuckLake read from the folder names
    newest_day = lake_query(settings, "SELECT max(event_timestamp)::DATE FROM lake.main.events")[0][0]
    assert lake_query(settings, "SELECT count(*) FROM lake.main.events WHERE event_timestamp::DATE = ?",
                      [newest_day])[0][0] > 0

    add_events(settings, 300, seed=4)  # a second batch into the newest day: two files to merge there
    run(settings, spark=spark)
    before = len(_lake_files(settings))
    result = maintain.run_maintenance(resolve(settings), timedelta(0), steps=(maintain.Step.COMPACT,))
    assert len(_lake_files(settings)) < before, result
    assert_lake_equals_source(settings, expected_rows=4_800)


def test_a_batch_whose_ids_the_lake_took_meanwhile_is_promoted_by_copy(settings, lake_env, spark):
    """Run A writes its files; run B (another process) loads the same rows first; A's files must
    not be registered on top of them."""
    add_events(settings, 1_000, seed=5)
    run(settings, mode="extract", spark=spark)
    resolved = resolve(settings)
    [batch] = staging.complete_batches(staging_folder(resolved))
    assert batch.lake_files
    paths = [Path(str(f["uri"])) for f in batch.lake_files]
    run(load_settings(lake_env), engine="dlt", mode="extract")  # B stages the same window...
    [_, other] = staging.complete_batches(staging_folder(resolved))
    promote_batch(resolved, other)  # ...and commits first
    result = promote_batch(resolved, batch)
    assert (result.rows_inserted, result.rows_duplicate) == (0, 1_000)
    assert files_registered(settings) == 0
    assert not any(p.exists() for p in paths)  # never registered, so removed at once
    assert_lake_equals_source(settings, expected_rows=1_000)


def test_orphans_of_a_crash_are_removed_and_files_a_staged_batch_waits_for_are_kept(settings, spark):
    add_events(settings, 800, seed=6)
    run(settings, mode="extract", spark=spark)  # staged, not promoted: its lake files wait
    resolved = resolve(settings)
    [batch] = staging.complete_batches(staging_folder(resolved))
    waiting = [Path(str(f["uri"])) for f in batch.lake_files]
    orphan = waiting[0].with_name("20200101T000000000000Z-deadbeef-00000.parquet")  # a crash's leftover
    orphan.write_bytes(waiting[0].read_bytes())
    old = time.time() - 2 * maintain.ORPHAN_GRACE.total_seconds()
    for path in [*waiting, orphan]:
        os.utime(path, (old, old))
    report = maintain.run_maintenance(resolved, timedelta(0), steps=(maintain.Step.COMPACT,))
    assert not orphan.exists() and report.files_deleted == 1
    assert all(p.exists() for p in waiting)
    run(settings, mode="promote")
    assert_lake_equals_source(settings, expected_rows=800)


def test_compaction_keeps_the_files_a_second_tables_staged_batch_waits_for(settings, spark):
    """A table listed second is no less the lake's: compaction kept from orphan cleanup only the files
    the first listed table's staged batches wait for, and would delete the second's."""
    from dataclasses import replace

    from generators.writer import add_sessions
    from pipeline.settings import TableSpec

    sessions, events = TableSpec("public.sessions", "started_at", "session_id"), TableSpec("public.events")
    both = resolve(replace(settings, tables=(sessions, events)))
    add_sessions(both.source_dsn, sessions.qualified, events.qualified, 20, seed=9)
    run(both, mode="extract", spark=spark)  # the group staged; the events' files wait in the lake's folder
    [batch] = staging.complete_batches(staging.table_dir(both, events))
    waiting = [Path(str(f["uri"])) for f in batch.lake_files]
    assert waiting  # zero-copy: Spark wrote the events table's own files
    old = time.time() - 2 * maintain.ORPHAN_GRACE.total_seconds()
    for path in waiting:
        os.utime(path, (old, old))
    maintain.run_maintenance(both, timedelta(0), steps=(maintain.Step.COMPACT,))
    assert all(p.exists() for p in waiting)
    assert run(both, mode="promote").rows_inserted == 20 + 60
    assert_lake_equals_source(both, expected_rows={"sessions": 20, "events": 60})


@COPY_MODE
def test_a_lake_made_in_copy_mode_takes_the_arrow_readers_files_as_they_are(settings, lake_env, spark, caplog):
    """A copy lake holds UUID/JSON; the arrow reader's files carry those types, so zero-copy
    registers them; Spark's own (JDBC reader's) writer cannot, so that reader copies into it."""
    add_events(settings, 500, seed=7, late_by=2 * DAY)  # out of the next window: no overlap to re-read
    run(settings, spark=spark)
    zero = load_settings({**lake_env, "PROMOTION": "zero-copy"})
    add_events(zero, 200, seed=8)
    report = run(zero, spark=spark)
    assert report.rows_inserted == 200 and files_registered(zero) >= 1
    if jdbc_jar():
        jdbc = load_settings({**lake_env, "PROMOTION": "zero-copy", "SPARK_READER": "jdbc"})
        add_events(jdbc, 100, seed=9)
        with caplog.at_level("INFO"):
            run(jdbc, spark=spark)
        assert "zero-copy promotion not used (this lake holds event_id UUID, details JSON, types Spark's own " \
            "Parquet writer cannot write" in caplog.text
    assert lake_query(zero, "SELECT DISTINCT typeof(event_id), typeof(details) FROM lake.main.events") == \
        [("UUID", "JSON")]
    # each batch's snapshot says how it was promoted, and why by copy
    reasons = [info["tables"]["events"].get("copy_reason") for info in commit_infos(zero, "tables")]
    assert reasons[:2] == ["PROMOTION=copy", None], reasons
    if jdbc_jar():
        assert reasons[2].startswith("this lake holds event_id UUID, details JSON"), reasons
    assert_lake_equals_source(zero, expected_rows=800 if jdbc_jar() else 700)


@NEEDS_JDBC_JAR
def test_a_lake_made_by_the_jdbc_reader_keeps_text_columns_and_the_arrow_reader_writes_text_into_it(
        lake_env, spark):
    jdbc = load_settings({**lake_env, "SPARK_READER": "jdbc"})
    add_events(jdbc, 600, seed=10, late_by=2 * DAY)  # out of the next window: zero-copy again
    assert run(jdbc, spark=spark).rows_inserted == 600
    arrow = load_settings(lake_env)
    add_events(arrow, 300, seed=11)
    assert run(arrow, spark=spark).rows_inserted == 300
    assert files_registered(arrow) >= 2  # both readers' files registered as they are
    assert lake_query(arrow, "SELECT DISTINCT typeof(event_id), typeof(details) FROM lake.main.events") == \
        [("VARCHAR", "VARCHAR")]
    assert_lake_equals_source(arrow, expected_rows=900)


def test_rows_the_lake_holds_are_counted_not_written_again_by_the_slice_tasks(lake_env, spark):
    """A window that overlaps the lake by less than half (the whole look-back re-read, as without
    an arrival column): the tasks read the lake's ids, write only the new rows as lake files and
    count the rest as duplicates (no second copy)."""
    settings = load_settings({**lake_env, "SOURCE_ARRIVAL_COLUMN": "none"})
    add_events(settings, 1_000, seed=12)
    run(settings, spark=spark)
    add_events(settings, 1_500, seed=13)  # inside the look-back with the first 1,000
    report = run(settings, spark=spark)
    [promotion] = [p for p in report.promotions if p.rows_inserted]
    assert (promotion.rows_inserted, promotion.rows_duplicate) == (1_500, 1_000)
    assert promotion.files_registered >= 1
    assert lake_query(settings, "SELECT count(*), count(DISTINCT event_id) FROM lake.main.events")[0] == \
        (2_500, 2_500)
    assert_lake_equals_source(settings, expected_rows=2_500)
