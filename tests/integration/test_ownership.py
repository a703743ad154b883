"""A lake owns its data folder: a marker names it, another lake stops before touching the
folder, and orphan cleanup deletes only files under the lake's own table folders."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path

import pytest

from pipeline.lake.maintain import run_maintenance
from pipeline.lake.ownership import DataFolderClaimed
from pipeline.settings import load_settings
from pipeline.settings.resolve import DATA_FOLDER_MARKER, resolve
from tests.helpers import add_events, assert_lake_equals_source, lake_query, run


def files_below(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def age(path: Path, hours: float = 2) -> None:
    old = time.time() - hours * 3600
    os.utime(path, (old, old))


def stray_parquet(path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    age(path)
    return path


def test_first_run_claims_the_folder_and_a_second_lake_there_stops_before_touching_it(settings, lake_env, cli):
    add_events(settings, 200, seed=1)
    run(settings, engine="dlt")
    data = Path(lake_env["DUCKLAKE_DATA_PATH"])
    marker = json.loads((data / DATA_FOLDER_MARKER).read_text())
    [[identity]] = lake_query(settings, "SELECT lake_id FROM lake.ops.lake_identity")
    assert marker["lake_id"] == identity and marker["lake_name"] == "lake"
    assert "password" not in json.dumps(marker).lower()

    other = {**lake_env, "DUCKLAKE_NAME": "other"}  # same catalog database, same data folder
    before = files_below(data)
    with pytest.raises(DataFolderClaimed, match="belongs to the lake lake"):
        run(load_settings(other), engine="dlt")
    for args in (("--run", "--engine", "dlt"), ("--maintain",), ("--write", "--sql", "CREATE TABLE t (i INT)")):
        result = cli(*args, env=other)
        assert result.returncode == 1, args
        assert "belongs to the lake lake" in result.stderr and "DUCKLAKE_DATA_PATH" in result.stderr
    assert files_below(data) == before
    assert_lake_equals_source(settings, 200)
    import psycopg

    catalog = resolve(settings).catalog.pg
    with psycopg.connect(catalog.conninfo()) as conn:  # the refused lake left nothing in the catalog
        assert conn.execute("SELECT to_regnamespace('other')").fetchone()[0] is None
    fixed = {**other, "DUCKLAKE_DATA_PATH": str(data).rstrip("/") + "-other/"}
    assert cli("--run", "--engine", "dlt", env=fixed).returncode == 0  # with a folder of its own, it runs
    assert json.loads((Path(fixed["DUCKLAKE_DATA_PATH"]) / DATA_FOLDER_MARKER).read_text())["lake_name"] == "other"


def test_a_lake_without_a_marker_gets_one_on_its_next_run(settings, lake_env):
    add_events(settings, 100, seed=1)
    run(settings, engine="dlt")
    marker = Path(lake_env["DUCKLAKE_DATA_PATH"]) / DATA_FOLDER_MARKER
    marker.unlink()  # as a lake made before markers
    from pipeline.lake import ownership

    ownership._claimed.clear()  # a new process
    add_events(settings, 50, seed=2)
    run(settings, engine="dlt")
    assert json.loads(marker.read_text())["lake_name"] == "lake"
    assert_lake_equals_source(settings, 150)


def test_orphan_cleanup_deletes_only_files_of_its_own_table_folders(settings, lake_env, new_lake_env):
    add_events(settings, 200, seed=1)
    run(settings, engine="dlt")
    data = Path(lake_env["DUCKLAKE_DATA_PATH"])
    # a second lake nested inside the first one's folder, with its own marker and files
    nested = {**new_lake_env("nested"), "DUCKLAKE_DATA_PATH": f"{data}/nested/"}
    nested_settings = load_settings(nested)
    add_events(nested_settings, 100, seed=3)
    run(nested_settings, engine="dlt")
    nested_files = {p: p.stat().st_size for p in (data / "nested").rglob("*.parquet")}
    assert nested_files
    for path in nested_files:
        age(path)
    own_orphan = stray_parquet(data / "main" / "events" / "year=2020" /
                               "ducklake-019a2100-61b3-7b7e-90d9-9cbdd60bf7cd.parquet")  # named as DuckLake names
    elsewhere = stray_parquet(data / "not-a-table" / "someone-elses.parquet")
    # a user's own files put inside the lake's table folders later: not named as the lake writes
    users = [stray_parquet(data / "main" / "events" / "my_analysis.parquet"),
             stray_parquet(data / "ops" / "batches" / "notes.parquet")]

    report = run_maintenance(resolve(settings), timedelta(days=7), delete_grace=timedelta(0))
    assert not own_orphan.exists()
    assert elsewhere.exists() and all(p.exists() for p in nested_files)
    assert all(p.exists() for p in users)
    assert report.files_deleted == 1 and report.bytes_deleted > 0  # the true size, not 0
    assert_lake_equals_source(settings, 200)
    assert_lake_equals_source(nested_settings, 100)


def test_a_lake_claims_only_a_new_or_empty_folder(settings, lake_env):
    from pipeline.errors import ConfigError

    data = Path(lake_env["DUCKLAKE_DATA_PATH"])
    mine = stray_parquet(data / "main" / "events" / "my_analysis.parquet")
    add_events(settings, 50, seed=1)
    with pytest.raises(ConfigError) as refused:
        run(settings, engine="dlt")
    assert "already holds files this lake did not write (main/events/my_analysis.parquet)" in str(refused.value)
    assert "new or empty folder" in refused.value.hint
    assert not (data / DATA_FOLDER_MARKER).exists() and mine.exists()
    mine.unlink()
    run(settings, engine="dlt")  # an empty folder is claimed
    assert_lake_equals_source(settings, 50)


@pytest.mark.parametrize(("data_path", "staging", "words"), [
    ("/", None, "is the filesystem root"),
    ("/etc/", None, "is a system folder"),
    ("~", None, "is a home folder"),
    ("{tmp}/data/", "{tmp}/data/staging", "overlap"),
])
def test_a_data_path_no_lake_may_own_is_refused_before_anything_is_created(lake_env, tmp_path, data_path,
                                                                           staging, words):
    from pipeline.errors import ConfigError

    env = {**lake_env, "DUCKLAKE_DATA_PATH": data_path.format(tmp=tmp_path)}
    if staging:
        env["STAGING_PATH"] = staging.format(tmp=tmp_path)
    with pytest.raises(ConfigError, match=words):
        resolve(load_settings(env))
