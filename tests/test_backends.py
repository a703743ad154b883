"""Every catalog backend and object storage, end to end: load, rerun, late events, time travel,
lake == source. S3 runs against a real S3-protocol server (moto's server mode) on loopback."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pipeline.errors import PipelineError
from pipeline.lake.attach_sql import open_statements, storage_secret_sql
from pipeline.ops.run import run
from pipeline.settings import StorageOptions, load_settings
from pipeline.settings.catalog import CatalogSpec
from pipeline.settings.secret import Secret
from tests.conftest import run_cli
from tests.helpers import add_events, assert_lake_equals_source, lake_query


def _full_cycle(settings) -> None:
    """Load, rerun, late events; then time travel back to the first load."""
    add_events(settings, 400, seed=1)
    [first] = run(settings, engine="dlt").snapshots
    assert run(settings, engine="dlt").rows_inserted == 0
    add_events(settings, 50, seed=2, late_by=timedelta(minutes=5))
    assert run(settings, engine="dlt").rows_inserted == 50
    assert lake_query(settings, f"SELECT count(*) FROM lake.main.events AT (VERSION => {first})")[0][0] == 400
    assert_lake_equals_source(settings, expected_rows=450)


@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
def test_file_catalogs_run_the_whole_cycle(kind, lake_env, tmp_path):
    env = {**lake_env, "DUCKLAKE_CATALOG": f"{kind}:{tmp_path / ('catalog.' + kind)}"}
    _full_cycle(load_settings(env))


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


def test_s3_data_path_end_to_end(s3_server, lake_env):
    port, client = s3_server
    env = {**lake_env, "DUCKLAKE_DATA_PATH": "s3://lake-bucket/events-lake/", "S3_ENDPOINT": f"127.0.0.1:{port}",
           "S3_URL_STYLE": "path", "S3_USE_SSL": "false", "S3_REGION": "us-east-1",
           "S3_ACCESS_KEY_ID": "testing", "S3_SECRET_ACCESS_KEY": "testing"}
    import os

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({k: v for k, v in env.items() if k.startswith("S3_")})
    try:
        _full_cycle(load_settings(env))
    finally:
        for key, value in saved.items():
            if key.startswith("S3_"):
                os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="lake-bucket")["Contents"]]
    assert any(k.startswith("events-lake/main/events/year=") and k.endswith(".parquet") for k in keys)
    result = run_cli("events_pipeline.py", "--json", "--sql", "SELECT count(*) AS n FROM lake.main.events", env=env)
    assert result.returncode == 0, result.stderr
    assert '"n": 450' in result.stdout


def test_gcs_and_r2_secrets_are_generated_and_masked():
    gcs = storage_secret_sql("lake", "gs://bucket/lake/", StorageOptions(key_id="HMACKEY", secret=Secret("HMACSECRET")), False)
    assert gcs == ("CREATE OR REPLACE SECRET lake_storage (TYPE gcs, KEY_ID 'HMACKEY', SECRET '***', "
                   "SCOPE 'gs://bucket/lake/')")
    r2 = storage_secret_sql("lake", "r2://bucket/lake/", StorageOptions(key_id="K", secret=Secret("S"), account_id="acc123"),
                            True)
    assert r2 == ("CREATE OR REPLACE SECRET lake_storage (TYPE r2, KEY_ID 'K', SECRET 'S', ACCOUNT_ID 'acc123', "
                  "SCOPE 'r2://bucket/lake/')")
    chain = storage_secret_sql("lake", "s3://b/p/", StorageOptions(region="eu-west-1"), False)
    assert "PROVIDER credential_chain" in chain and "REGION 'eu-west-1'" in chain
    statements = open_statements("lake", CatalogSpec.parse("sqlite:/x/c.sqlite"), "gs://bucket/lake/")
    assert statements[:2] == ["LOAD sqlite", "LOAD httpfs"]
    assert statements[-1].startswith("ATTACH 'ducklake:sqlite:/x/c.sqlite' AS lake (DATA_PATH 'gs://bucket/lake/'")


def test_wrong_catalogs_get_clear_errors(lake_env, tmp_path):
    (tmp_path / "a_folder").mkdir()
    bad_sqlite = load_settings({**lake_env, "DUCKLAKE_CATALOG": f"sqlite:{tmp_path}/a_folder"})
    add_events(bad_sqlite, 1, seed=6)
    with pytest.raises(PipelineError, match="a_folder") as err:
        run(bad_sqlite, engine="dlt")
    assert "DUCKLAKE_CATALOG" in str(err.value)
    result = run_cli("events_pipeline.py", "--status",
                     env={**lake_env, "DUCKLAKE_CATALOG": "postgresql://nobody:pw_secret@127.0.0.1:1/cat"})
    assert result.returncode == 1
    assert "127.0.0.1:1/cat" in result.stderr and "pw_secret" not in result.stderr + result.stdout
    assert "temporary" in result.stdout
