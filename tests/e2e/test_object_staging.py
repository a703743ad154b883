"""Staging on object storage (``STAGING_PATH=s3://bucket/prefix``) against a real S3-protocol
server on loopback (moto's server mode): batches are written, listed, promoted and removed in
the bucket, crashes in between lose nothing, and Spark's side is configured or fails clearly."""

from __future__ import annotations

import secrets

import pytest

from pipeline import staging
from pipeline.errors import ConfigError
from pipeline.extract.spark_s3a import HADOOP_AWS, s3a_conf
from pipeline.settings import load_settings
from tests.conftest import COPY_MODE, NEEDS_JDBC_JAR, run_cli
from tests.helpers import (
    add_events,
    assert_lake_equals_source,
    data_snapshots,
    files_registered,
    full_cycle,
    lake_query,
    run,
    staging_folder,
)


@pytest.fixture
def s3_env(s3_server, lake_env):
    """A pipeline whose staging is a fresh prefix in the loopback bucket (data stays on disk)."""
    port, client = s3_server
    prefix = f"staging-{secrets.token_hex(4)}"
    env = {**lake_env, "STAGING_PATH": f"s3://lake-bucket/{prefix}", "S3_ENDPOINT": f"127.0.0.1:{port}",
           "S3_URL_STYLE": "path", "S3_USE_SSL": "false", "S3_REGION": "us-east-1",
           "S3_ACCESS_KEY_ID": "testing", "S3_SECRET_ACCESS_KEY": "staging-secret-value"}

    def keys() -> list[str]:
        """The objects under the prefix (not folder markers, which pyarrow leaves behind)."""
        listing = client.list_objects_v2(Bucket="lake-bucket", Prefix=prefix + "/")
        return [o["Key"].removeprefix(prefix + "/") for o in listing.get("Contents", [])
                if not o["Key"].endswith("/")]

    return env, keys


def _s3a_conf(settings) -> dict[str, str]:
    return s3a_conf(settings.staging_path, settings.staging_writer, settings.spark.reader, settings.storage)


def test_s3_staging_survives_extract_only_and_a_crash_then_promotes_everything(s3_env):
    env, keys = s3_env
    settings = load_settings(env)
    add_events(settings, 700, seed=41)
    extracted = run_cli("events_pipeline.py", "--extract-only", "--engine", "dlt", env=env)
    assert extracted.returncode == 0, extracted.stdout + extracted.stderr
    [manifest_key] = [k for k in keys() if k.endswith(staging.MANIFEST)]
    assert manifest_key.startswith("events/batch_id=")
    assert any(k.startswith(manifest_key.rsplit("/", 1)[0]) and k.endswith(".parquet") for k in keys())

    add_events(settings, 300, seed=42)
    crashed = run_cli("tests/faulty_cli.py", "--extract-only", "--engine", "dlt",
                      env={**env, "EVENT_LAKE_TEST_FAULT": "after-stage"})
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr
    assert len(staging.complete_batches(staging_folder(settings))) == 2
    assert data_snapshots(settings) == []

    report = run(settings, engine="dlt")
    # both staged batches committed (the second re-read the first's window: no batch had been
    # promoted, so no arrival mark either); the run's own plan then reads what arrived since the
    # second batch's mark: nothing, so it stages no third batch
    assert [p.outcome for p in report.promotions] == ["committed", "committed"]
    assert report.rows_inserted == 1_000 and report.staged_batch is None and report.rows_in_window == 0
    assert keys() == []  # promoted batches are removed from the bucket
    assert_lake_equals_source(settings, expected_rows=1_000)
    for output in (extracted, crashed):
        assert "staging-secret-value" not in output.stdout + output.stderr


def test_spark_with_driver_staging_writes_the_batch_to_s3(s3_env, spark):
    """Spark Connect to a remote cluster with S3 staging: the executors read, this process
    writes the files into the bucket (no hadoop-aws needed anywhere)."""
    env, keys = s3_env
    settings = load_settings({**env, "STAGING_WRITER": "driver"})
    add_events(settings, 900, seed=43)
    report = run(settings, mode="extract", spark=spark)
    batch_keys = [k for k in keys() if report.tables["events"].staged_batch in k]
    assert sorted(k.rsplit("/", 1)[1] for k in batch_keys) == [staging.MANIFEST, "part-00000.parquet"]
    run(settings, mode="promote")
    assert keys() == []
    assert_lake_equals_source(settings, expected_rows=900)


@COPY_MODE
def test_the_arrow_readers_tasks_write_s3_staging_without_hadoop(s3_env, spark):
    """Executor staging on object storage, offline: each task writes its slice's file into the
    bucket through pyarrow's S3 filesystem (no hadoop-aws, no s3a)."""
    env, keys = s3_env
    settings = load_settings({**env, "SPARK_PARTITIONS": "3"})
    add_events(settings, 1_200, seed=45)
    report = run(settings, mode="extract", spark=spark)
    batch_keys = sorted(k.rsplit("/", 1)[1] for k in keys() if report.tables["events"].staged_batch in k)
    assert batch_keys == [staging.MANIFEST, "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert run(settings, mode="promote").rows_inserted == 1_200
    assert keys() == []
    assert_lake_equals_source(settings, expected_rows=1_200)


def test_zero_copy_on_object_storage_registers_the_tasks_files_in_the_bucket(s3_env, spark):
    """DUCKLAKE_DATA_PATH and STAGING_PATH both in the bucket: the tasks write the lake's own
    UUID/JSON files into its day folders there, promotion registers them; lake == source."""
    env, keys = s3_env
    data = f"s3://lake-bucket/data-{secrets.token_hex(4)}/"
    settings = load_settings({**env, "DUCKLAKE_DATA_PATH": data})
    add_events(settings, 900, seed=46)
    report = run(settings, spark=spark)
    assert report.rows_inserted == 900 and files_registered(settings) >= 1
    paths = [r[0] for r in lake_query(settings, "SELECT data_file FROM ducklake_list_files('lake', 'events')")]
    assert paths and all(p.startswith(f"{data}main/events/year=") for p in paths), paths
    assert lake_query(settings, "SELECT DISTINCT typeof(event_id), typeof(details) FROM lake.main.events") == \
        [("UUID", "JSON")]
    assert keys() == []  # nothing left staged
    assert_lake_equals_source(settings, expected_rows=900)


@COPY_MODE  # zero-copy has the executors write into the (local) data path: no s3a write at all
@NEEDS_JDBC_JAR
def test_spark_executors_without_hadoop_aws_fail_clearly_and_lose_nothing(s3_env, spark):
    """The JDBC reader's executors write through Spark's own writer, which needs hadoop-aws."""
    env, keys = s3_env
    env = {**env, "SPARK_READER": "jdbc"}
    settings = load_settings(env)
    add_events(settings, 200, seed=44)
    with pytest.raises(ConfigError, match="cannot write s3a://") as err:
        run(settings, spark=spark)
    assert HADOOP_AWS in err.value.hint and "STAGING_WRITER=driver" in err.value.hint
    assert data_snapshots(settings) == [] and staging.complete_batches(staging_folder(settings)) == []
    report = run(load_settings({**env, "STAGING_WRITER": "driver"}), spark=spark)
    assert report.rows_inserted == 200


def test_incomplete_s3_batches_are_cleaned_and_complete_ones_kept(s3_env):
    env, keys = s3_env
    table = staging_folder(load_settings(env))
    incomplete, complete = table.child("batch_id=1-incomplete"), table.child("batch_id=2-complete")
    for folder in (incomplete, complete):
        folder.make(exist_ok=False)
        with folder.open_output("part-00000.parquet") as out:
            out.write(b"not parquet")
    complete.write_text(staging.MANIFEST, "{}")
    assert staging.clean_stale(table, older_than_seconds=3600) == []  # young: may still be written
    assert [f.name for f in staging.clean_stale(table, older_than_seconds=-1)] == ["batch_id=1-incomplete"]
    assert sorted(keys()) == ["events/batch_id=2-complete/_manifest.json",
                              "events/batch_id=2-complete/part-00000.parquet"]


def test_s3_staging_settings_reach_spark_and_odd_schemes_are_refused(s3_env):
    env, _ = s3_env
    assert _s3a_conf(load_settings(env)) == {}  # the arrow reader's tasks write through pyarrow
    env = {**env, "SPARK_READER": "jdbc"}
    conf = _s3a_conf(load_settings(env))
    port = env["S3_ENDPOINT"].split(":")[1]
    assert conf == {"fs.s3a.access.key": "testing", "fs.s3a.secret.key": "staging-secret-value",
                    "fs.s3a.endpoint": f"http://127.0.0.1:{port}", "fs.s3a.endpoint.region": "us-east-1",
                    "fs.s3a.connection.ssl.enabled": "false", "fs.s3a.path.style.access": "true"}
    assert _s3a_conf(load_settings({**env, "STAGING_WRITER": "driver"})) == {}
    with pytest.raises(ConfigError, match="s3://bucket/prefix"):
        load_settings({**env, "STAGING_PATH": "gs://bucket/staging"})


def test_an_object_store_outage_is_temporary_names_the_store_and_loses_nothing(lake_env):
    """The store goes away with a complete batch staged: --promote-only and --run fail in one
    plain temporary line naming the store (not "unexpected error"), and once it is back the
    batch is promoted, exactly once."""
    from moto.server import ThreadedMotoServer

    server, port, env = _staging_on_a_store_of_its_own(lake_env, "outage-bucket", "outage-secret-value")
    settings = load_settings(env)
    add_events(settings, 400, seed=43)
    try:
        assert run_cli("events_pipeline.py", "--extract-only", "--engine", "dlt", env=env).returncode == 0
        server.stop()
        for args in (("--promote-only",), ("--run", "--engine", "dlt")):
            down = run_cli("events_pipeline.py", *args, env=env)
            assert down.returncode == 1, args
            output = down.stdout + down.stderr
            assert "STAGING_PATH=s3://outage-bucket/staging" in output and "object store" in output, output
            assert "unexpected error" not in output and "Failed (temporary" in output
            assert "outage-secret-value" not in output
        assert data_snapshots(settings) == []
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)  # back, with its objects
        server.start()
        back = run_cli("events_pipeline.py", "--run", "--engine", "dlt", env=env)
        assert back.returncode == 0, back.stdout + back.stderr
        assert_lake_equals_source(settings, expected_rows=400)
        assert len(data_snapshots(settings)) == 1
    finally:
        server.stop()


def test_s3_data_path_end_to_end(s3_server, lake_env):
    port, client = s3_server
    env = {**lake_env, "DUCKLAKE_DATA_PATH": "s3://lake-bucket/events-lake/", "S3_ENDPOINT": f"127.0.0.1:{port}",
           "S3_URL_STYLE": "path", "S3_USE_SSL": "false", "S3_REGION": "us-east-1",
           "S3_ACCESS_KEY_ID": "testing", "S3_SECRET_ACCESS_KEY": "testing"}
    import os

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({k: v for k, v in env.items() if k.startswith("S3_")})
    try:
        full_cycle(load_settings(env))
    finally:
        for key, value in saved.items():
            if key.startswith("S3_"):
                os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="lake-bucket")["Contents"]]
    assert any(k.startswith("events-lake/main/events/year=") and k.endswith(".parquet") for k in keys)
    result = run_cli("events_pipeline.py", "--json", "--sql", "SELECT count(*) AS n FROM lake.main.events", env=env)
    assert result.returncode == 0, result.stderr
    assert '"n": 450' in result.stdout


def test_the_store_lost_mid_extraction_is_named_not_an_unexpected_error(lake_env):
    """The S3 server killed while the slices read: the run fails in one temporary line naming
    the store — the release of the batch's claim, which fails too, no longer replaces it with an
    OSError ("unexpected error … please report it")."""
    from tests.helpers import Proc, wait_for_slow_reads

    server, _, env = _staging_on_a_store_of_its_own(lake_env, "gone-bucket", "testing")
    env = {**env, "PROMOTION": "copy", "EVENT_LAKE_TEST_FAULT": "slow-read", "SPARK_PARTITIONS": "1"}
    add_events(load_settings(env), 300, seed=44)
    proc = Proc("tests/faulty_cli.py", "--run", "--metrics-port", "0", env=env)
    try:
        wait_for_slow_reads(lake_env["SOURCE_PG_DSN"], count=1)
    finally:
        server.stop()
    code = proc.popen.wait(180)
    output = proc.output
    assert code == 1, output
    assert "object store" in output and "STAGING_PATH=s3://gone-bucket/staging" in output, output[-3000:]
    assert "unexpected error" not in output and "Failed (temporary" in output, output[-3000:]


def _staging_on_a_store_of_its_own(lake_env: dict[str, str], bucket: str, secret: str):
    """A moto S3 server of the test's own (the test stops it; the session's ``s3_server`` must
    live on), a bucket in it, and ``lake_env`` staging there. Returns (server, port, env)."""
    import boto3
    from moto.server import ThreadedMotoServer

    from tests.spark_services import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                 aws_access_key_id="testing", aws_secret_access_key="testing").create_bucket(Bucket=bucket)
    env = {**lake_env, "STAGING_PATH": f"s3://{bucket}/staging", "S3_ENDPOINT": f"127.0.0.1:{port}",
           "S3_URL_STYLE": "path", "S3_USE_SSL": "false", "S3_REGION": "us-east-1",
           "S3_ACCESS_KEY_ID": "testing", "S3_SECRET_ACCESS_KEY": secret}
    return server, port, env


def test_the_store_lost_as_a_batch_is_claimed_is_named_and_temporary(lake_env, monkeypatch):
    """S3 gone between the plan and the batch's claim (the claim was outside the store's error
    naming): "Failed with an unexpected error … please report it", classed as needs-a-fix."""
    from pipeline.errors import StorageUnavailable, is_transient
    from pipeline.load import image_plan

    server, _, env = _staging_on_a_store_of_its_own(lake_env, "claim-bucket", "claim-secret-value")
    settings = load_settings(env)
    add_events(settings, 50, seed=45)
    planned = image_plan.plan_batch

    def plan_then_lose_the_store(*args, **kwargs):
        plan = planned(*args, **kwargs)
        server.stop()  # a real outage, timed by the test: the store is gone at the claim
        return plan

    monkeypatch.setattr(image_plan, "plan_batch", plan_then_lose_the_store)
    try:
        with pytest.raises(StorageUnavailable) as lost:
            run(settings, engine="dlt")
    finally:
        server.stop()
    assert "STAGING_PATH=s3://claim-bucket/staging" in str(lost.value) and is_transient(lost.value)
    assert "claim-secret-value" not in str(lost.value)
