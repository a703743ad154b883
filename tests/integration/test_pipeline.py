"""Correctness against real Postgres, real Spark and a real DuckLake, in this process: the lake
equals the source after loads, reruns, late events and reconcile (crashes and concurrent
processes: tests/e2e/test_crashes.py)."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from pipeline import staging
from pipeline.lake import validate
from pipeline.load import verify
from pipeline.settings import load_settings
from pipeline.settings.resolve import resolve
from pipeline.storage.folder import Folder
from tests.conftest import BOTH_MODES, COPY_MODE
from tests.helpers import (
    add_events,
    assert_lake_equals_source,
    assert_promoted_by_mode,
    data_snapshots,
    jobs_table,
    lake_query,
    promote_batch,
    run,
    snapshot_ids,
    source_db,
    source_table,
    staging_folder,
)


@BOTH_MODES
def test_first_load_copies_every_event(settings, spark):
    add_events(settings, 5_000, seed=1)
    report = run(settings, spark=spark)
    assert report.rows_inserted == 5_000
    assert len(report.snapshots) == 1
    assert_lake_equals_source(settings, expected_rows=5_000)
    assert_promoted_by_mode(settings)


@BOTH_MODES
@pytest.mark.parametrize(("arrival", "reread"), [("created_at", 0), ("none", 2_000)])
def test_a_rerun_changes_nothing_and_late_events_inside_lookback_are_caught_once(lake_env, spark, arrival,
                                                                                 reread):
    """One history for both (each needs a first load): a rerun with nothing new, then late rows."""
    settings = load_settings({**lake_env, "SOURCE_ARRIVAL_COLUMN": arrival})
    add_events(settings, 2_000, seed=3)
    run(settings, spark=spark)
    before = snapshot_ids(settings)
    report = run(settings, spark=spark)
    assert report.rows_inserted == 0
    # nothing arrived, so nothing is read; without an arrival column the look-back is re-read...
    assert report.rows_in_window == reread
    assert snapshot_ids(settings) == before  # ...and the lake did not change at all
    assert_lake_equals_source(settings, expected_rows=2_000)
    add_events(settings, 300, seed=4, late_by=timedelta(minutes=10))  # lookback is 15m
    report = run(settings, spark=spark)
    assert report.rows_inserted == 300
    # by arrival, only the late rows are read; without, the 2,000 of the look-back again
    assert report.promotions[-1].rows_duplicate == reread
    assert report.rows_in_window == 300 + reread
    assert_lake_equals_source(settings, expected_rows=2_300)
    assert_promoted_by_mode(settings)


def test_events_later_than_lookback_are_missed_by_runs_and_backfilled_by_reconcile(settings, lake_env, spark, cli):
    """The look-back is the runs' tolerance: an event older than it that no arrival finds is not
    picked up by --run, and --reconcile finds it hour by hour and backfills it in one snapshot that says so."""
    add_events(settings, 100, seed=5)
    run(settings, spark=spark)
    add_events(settings, 10, seed=6, late_by=timedelta(hours=2))
    # a replay that stamps them as arrived when they happened: no arrival finds them (rows that do
    # arrive now are read by the next load, tests/integration/test_arrivals.py)
    with source_db(settings) as conn:
        conn.execute(f"UPDATE {source_table(settings)} SET created_at = event_timestamp "
                     "WHERE event_timestamp < now() - interval '1 hour'")
    assert run(settings, spark=spark).rows_inserted == 0
    [missing] = verify.compare(resolve(settings)).tables.values()  # --verify names rows that differ
    assert not missing.equal and len(missing.differences) == 5, missing.describe()
    assert all(line.startswith("only in the source: event_id ") for line in missing.differences)

    result = cli("--reconcile", "--since", "1d", "--json", env=lake_env)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["rows_backfilled"] == 10 and len(report["hours_differing"]) >= 1
    assert report["lake_rows_not_in_source"] == 0
    [message] = lake_query(settings, "SELECT commit_message FROM lake.snapshots() WHERE snapshot_id = ?",
                           [report["snapshot_id"]])[0]
    assert message.startswith("reconcile group") and "events 10 row(s), backfill late events" in message
    assert_lake_equals_source(settings, expected_rows=110)
    again = cli("--reconcile", "--json", env=lake_env)
    assert json.loads(again.stdout)["hours_differing"] == []


def test_dlt_engine_builds_the_same_lake_as_spark(settings, lake_env, spark, tmp_path):
    from pipeline.settings import load_settings

    add_events(settings, 4_000, seed=7)
    run(settings, spark=spark)
    other = load_settings({**lake_env, "DUCKLAKE_NAME": "lake_dlt",
                           "DUCKLAKE_DATA_PATH": str(tmp_path / "data_dlt") + "/",
                           "STAGING_PATH": str(tmp_path / "staging_dlt")})
    report = run(other, engine="dlt")
    assert report.rows_inserted == 4_000
    assert_lake_equals_source(settings, expected_rows=4_000)
    assert_lake_equals_source(other, expected_rows=4_000)


def _stage_one_batch(settings, spark, rows: int, seed: int):
    """Write ``rows`` events and extract them into exactly one staged batch (not promoted)."""
    add_events(settings, rows, seed=seed)
    run(settings, mode="extract", spark=spark)
    resolved = resolve(settings)
    [batch] = staging.complete_batches(staging_folder(resolved))
    return resolved, batch


def test_the_same_batch_promoted_twice_is_skipped(settings, spark):
    resolved, batch = _stage_one_batch(settings, spark, 1_000, seed=8)
    folder = Path(batch.folder.path)
    copy = folder.with_name(folder.name + "-copy")
    shutil.copytree(folder, copy)
    first = promote_batch(resolved, batch)
    copied = staging.StagedBatch(Folder(batch.folder.fs, "", str(copy)), batch.manifest)
    again = promote_batch(resolved, copied)
    assert first.outcome == "committed" and first.rows_inserted == 1_000
    assert again.outcome == "already promoted" and again.rows_inserted == 0
    assert not copy.exists()
    assert_lake_equals_source(settings, expected_rows=1_000)


def test_incomplete_batch_without_manifest_is_never_promoted(settings, spark):
    _, batch = _stage_one_batch(settings, spark, 500, seed=9)
    (Path(batch.folder.path) / staging.MANIFEST).unlink()
    report = run(settings, mode="promote")
    assert report.promotions == []
    assert data_snapshots(settings) == []


@COPY_MODE
def test_duplicate_ids_inside_one_batch_keep_the_newest_row(settings, spark):
    """A batch can repeat an id (e.g. two overlapping staged files); the newest created_at wins."""
    import duckdb

    resolved, batch = _stage_one_batch(settings, spark, 200, seed=14)
    first = Path(batch.folder.path) / batch.manifest.files[0]
    copy = Path(batch.folder.path) / "part-dup.parquet"
    duckdb.sql(f"COPY (SELECT * REPLACE (created_at + INTERVAL 1 HOUR AS created_at, 'changed' AS event_type) "
               f"FROM '{first}' LIMIT 10) TO '{copy}' (FORMAT parquet)")
    manifest = staging.Manifest(**{**batch.manifest.__dict__, "files": [*batch.manifest.files, copy.name]})
    result = promote_batch(resolved, staging.StagedBatch(batch.folder, manifest))
    # the 10 older copies differ from their newer ones: conflicts, kept in the quarantine
    assert (result.rows_staged, result.rows_inserted, result.rows_duplicate, result.rows_quarantined) == \
        (210, 200, 0, 10)
    from tests.helpers import lake_query

    assert lake_query(settings, "SELECT count(*) FROM lake.main.events WHERE event_type = 'changed'")[0][0] == 10
    assert lake_query(settings, "SELECT reason, count(*) FROM lake.ops.quarantine WHERE event_type <> 'changed' "
                                "GROUP BY ALL") == [(validate.REASON_CONFLICT, 10)]


def test_spark_partitions_overrides_the_planned_split(settings, lake_env, spark):
    from pipeline.settings import load_settings

    add_events(settings, 2_000, seed=15)
    three = load_settings({**lake_env, "SPARK_PARTITIONS": "3"})
    report = run(three, mode="extract", spark=spark)
    [batch] = staging.complete_batches(staging_folder(three))
    assert batch.batch_id == report.tables["events"].staged_batch
    assert len(batch.manifest.files) + len(batch.lake_files) == 3, batch.manifest


def test_lakes_sharing_a_staging_folder_promote_only_their_own_batches(lake_env, new_lake_env):
    """Two configurations, one staging folder: each run promotes only batches its own lake staged."""
    from pipeline.settings import load_settings

    a = load_settings(lake_env)
    b = load_settings({**new_lake_env("b"), "STAGING_PATH": lake_env["STAGING_PATH"]})
    add_events(a, 300, seed=16)
    add_events(b, 200, seed=17)
    run(a, mode="extract", engine="dlt")  # A's batch waits in the shared folder
    report = run(b, engine="dlt")
    assert report.rows_inserted == 200 and len(report.promotions) == 1
    assert_lake_equals_source(b, expected_rows=200)
    [waiting] = staging.complete_batches(staging_folder(a))
    assert waiting.manifest.lake_id and waiting.manifest.source.endswith(".public.events")
    assert run(a, mode="promote").rows_inserted == 300
    assert_lake_equals_source(a, expected_rows=300)


def test_one_cli_run_plans_once_and_attaches_the_lake_once(lake_env, settings, spark, cli, monkeypatch):
    """The shape of a run, traced: one plan, one lake attach — for the load and its job record."""
    from pipeline.lake import connect as lake_connect
    from pipeline.lake import instances
    from pipeline.load import image_plan

    add_events(settings, 500, seed=40)
    assert cli("--run", env=lake_env).returncode == 0  # creates the lake
    add_events(settings, 200, seed=41)
    instances.drop_all()  # as a new process: the first run's attach is not there to share
    attaches: list[str] = []
    plans: list[str] = []
    real_connect, real_plan = lake_connect.connect, image_plan.plan_batch
    monkeypatch.setattr(lake_connect, "connect",
                        lambda *a, **k: attaches.append("attach") or real_connect(*a, **k))
    monkeypatch.setattr(image_plan, "plan_batch", lambda *a, **k: plans.append("plan") or real_plan(*a, **k))
    result = cli("--run", env=lake_env)
    assert result.returncode == 0, result.stderr
    assert (attaches, plans) == (["attach"], ["plan"])
    monkeypatch.undo()
    assert lake_query(settings, f"SELECT count(*) FROM {jobs_table(settings)} WHERE job = 'load'") == [(2,)]
    assert_lake_equals_source(settings, expected_rows=700)
