"""Every catalog backend, end to end: load, rerun, late events, time travel, lake == source
(an S3 data path: tests/e2e/test_object_staging.py)."""

from __future__ import annotations

from datetime import datetime

import pytest

from pipeline.errors import PipelineError
from pipeline.ops.pipeline import Pipeline
from pipeline.settings import load_settings
from tests.helpers import add_events, full_cycle, lake_query, run


@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
def test_file_catalogs_run_the_whole_cycle(kind, lake_env, tmp_path):
    env = {**lake_env, "DUCKLAKE_CATALOG": f"{kind}:{tmp_path / ('catalog.' + kind)}"}
    settings = load_settings(env)
    full_cycle(settings)
    # --status reads the job history as instants (a SQLite catalog gives its timestamps as text:
    # its status crashed comparing them)
    with Pipeline(settings) as pipeline:
        pipeline.run(record_as="load")
        status = pipeline.status()
    assert status.health.state == "healthy", status.health
    assert isinstance(status.health.last_success, datetime) and status.jobs["load"]["status"] == "success"


def test_sqlite_catalog_uses_wal(lake_env, tmp_path):
    import sqlite3

    path = tmp_path / "c.sqlite"
    settings = load_settings({**lake_env, "DUCKLAKE_CATALOG": f"sqlite:{path}"})
    add_events(settings, 10, seed=3)
    run(settings, engine="dlt")
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_two_lakes_in_one_postgres_database_never_mix(lake_env, tmp_path):
    a = load_settings(lake_env)
    b = load_settings({**lake_env, "DUCKLAKE_NAME": "other", "DUCKLAKE_DATA_PATH": str(tmp_path / "other") + "/"})
    add_events(a, 100, seed=4)
    run(a, engine="dlt")
    run(b, engine="dlt")
    add_events(a, 10, seed=5)
    run(a, engine="dlt")
    assert lake_query(a, "SELECT count(*) FROM lake.main.events")[0][0] == 110
    assert lake_query(b, "SELECT count(*) FROM other.main.events")[0][0] == 100
    schemas = lake_query(a, "SELECT count(DISTINCT snapshot_id) FROM lake.snapshots()")[0][0]
    assert schemas != lake_query(b, "SELECT count(DISTINCT snapshot_id) FROM other.snapshots()")[0][0]


def test_wrong_catalogs_get_clear_errors(lake_env, tmp_path, cli):
    (tmp_path / "a_folder").mkdir()
    bad_sqlite = load_settings({**lake_env, "DUCKLAKE_CATALOG": f"sqlite:{tmp_path}/a_folder"})
    add_events(bad_sqlite, 1, seed=6)
    with pytest.raises(PipelineError, match="a_folder") as err:
        run(bad_sqlite, engine="dlt")
    assert "DUCKLAKE_CATALOG" in str(err.value)
    result = cli("--status",
                     env={**lake_env, "DUCKLAKE_CATALOG": "postgresql://nobody:pw_secret@127.0.0.1:1/cat"})
    assert result.returncode == 2  # a lake that cannot be read is failing, as README says
    shown = result.stderr + result.stdout
    assert "127.0.0.1:1/cat" in shown and "pw_secret" not in shown
    assert "the lake cannot be read: Cannot reach" in shown
