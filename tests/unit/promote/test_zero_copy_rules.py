"""When zero-copy promotion is used, and which files orphan cleanup may delete (pure)."""

from __future__ import annotations

import json

from pipeline.lake.ownership import deletable_orphans
from pipeline.promote import zero_copy
from pipeline.settings import load_settings
from pipeline.settings.resolve import DATA_FOLDER_MARKER, default_data_path


def test_zero_copy_is_used_only_when_each_premise_holds():
    settings = load_settings({"EVENT_LAKE_HOME": "/tmp/x", "DUCKLAKE_DATA_PATH": "/tmp/x/data/"})
    jdbc = load_settings({"EVENT_LAKE_HOME": "/tmp/x", "DUCKLAKE_DATA_PATH": "/tmp/x/data/", "SPARK_READER": "jdbc"})
    on_s3 = load_settings({"EVENT_LAKE_HOME": "/tmp/x", "DUCKLAKE_DATA_PATH": "s3://b/lake/"})
    on_s3_jdbc = load_settings({"EVENT_LAKE_HOME": "/tmp/x", "DUCKLAKE_DATA_PATH": "s3://b/lake/",
                                "SPARK_READER": "jdbc"})
    text = {"event_id": "VARCHAR", "details": "VARCHAR"}
    typed = {"event_id": "UUID", "details": "JSON"}
    typed_source = {"event_id": "uuid", "event_type": "text", "event_timestamp": "timestamptz",
                    "details": "jsonb", "created_at": "timestamptz"}
    for ok in (settings, jdbc, on_s3):
        assert zero_copy.blocker(ok, "spark", text, typed_source, True, {}) is None
    assert zero_copy.blocker(settings, "spark", typed, typed_source, True, {}) is None  # arrow writes UUID/JSON
    assert zero_copy.blocker(on_s3, "spark", typed, typed_source, True, {}) is None  # through pyarrow's S3
    cases = {
        "dlt engine": zero_copy.blocker(settings, "dlt", text, typed_source, True, {}),
        "UUID lake": zero_copy.blocker(jdbc, "spark", typed, typed_source, True, {}),
        "s3 jdbc": zero_copy.blocker(on_s3_jdbc, "spark", text, typed_source, True, {}),
        "text ids": zero_copy.blocker(settings, "spark", text, {**typed_source, "event_id": "text"}, True, {}),
        "no unique": zero_copy.blocker(settings, "spark", text, typed_source, False, {}),
        "drift": zero_copy.blocker(settings, "spark", text, typed_source, True, {"region": "VARCHAR"}),
        # Spark's files hold the events shape: a table with its own columns is promoted by copy
        "own columns": zero_copy.blocker(settings, "spark", text, typed_source, True, {},
                                         named_by=("session_id", "started_at")),
        "no details": zero_copy.blocker(settings, "spark", text,
                                        {k: v for k, v in typed_source.items() if k != "details"}, True, {}),
    }
    assert "dlt engine" in cases["dlt engine"]
    assert "event_id UUID" in cases["UUID lake"] and "SPARK_READER=arrow" in cases["UUID lake"]
    assert "s3://b/lake/" in cases["s3 jdbc"] and "SPARK_READER=arrow" in cases["s3 jdbc"]
    assert "event_id is text" in cases["text ids"]
    assert "unique index on event_id" in cases["no unique"]
    assert "region" in cases["drift"]
    assert "names its own session_id, started_at" in cases["own columns"]
    assert "lacks details" in cases["no details"]


def test_deletable_orphans_is_limited_to_own_folders_outside_foreign_markers():
    a, f = "ducklake-0a1b2c3d-0000-7000-8000-000000000001.parquet", "20261125T001637027776Z-dab61b88-00003.parquet"
    candidates = [f"/d/main/events/{a}", f"/d/main/events/x/b/{a}", f"/d/other/t/{a}",
                  f"/d/main/eventsX/{a}", f"s3://b/p/main/events/day=1/{f}",
                  "/d/main/events/my_analysis.parquet", "/d/main/events/part-00000.parquet"]  # a user's files
    assert deletable_orphans(candidates, ["/d/main/events/", "s3://b/p/main/events"], ["/d/main/events/x/"]) \
        == [f"/d/main/events/{a}", f"s3://b/p/main/events/day=1/{f}"]


def test_default_data_folder_is_per_lake_and_a_legacy_one_is_kept(tmp_path):
    home = tmp_path / "home"
    assert default_data_path(home, "lake") == f"{home}/data/lake/"
    assert default_data_path(home, "sales") == f"{home}/data/sales/"
    (home / "data" / "main").mkdir(parents=True)  # a lake made before data folders were per lake
    assert default_data_path(home, "lake") == f"{home}/data/"
    (home / "data" / DATA_FOLDER_MARKER).write_text(json.dumps({"lake_name": "lake"}))
    assert default_data_path(home, "lake") == f"{home}/data/"
    assert default_data_path(home, "sales") == f"{home}/data/sales/"
