"""A standalone Spark cluster from the pyspark package: the pipeline's tasks run on its worker,
and a worker that cannot see the driver's staging folder fails the run instead of losing rows."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import run_cli
from tests.helpers import add_events, assert_lake_equals_source, data_snapshots
from tests.spark_services import StandaloneCluster

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")


def test_a_run_on_a_standalone_cluster_loads_everything_through_its_worker(settings, lake_env, tmp_path):
    cluster = StandaloneCluster(tmp_path / "cluster").start()
    try:
        add_events(settings, 3_000, seed=91)
        env = {**lake_env, "SPARK_MASTER": cluster.url, "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_CONF": "spark.executor.memory=600m"}
        result = run_cli("events_pipeline.py", "--run", "--spark-conf", "spark.cores.max=1", env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert cluster.executor_logs(), "no executor ran on the worker"
        # SPARK_CONF reached the cluster: the worker launched the executor with that heap
        assert "-Xmx600M" in (cluster.work / "worker.log").read_text()
    finally:
        cluster.stop()
    assert_lake_equals_source(settings, expected_rows=3_000)


def test_a_worker_without_the_staging_folder_fails_the_run_unless_the_driver_stages(settings, lake_env, tmp_path):
    """Another host: the worker sees neither the staging folder nor the lake's data path (where
    zero-copy writes the lake's files)."""
    staging = tmp_path / "staging"
    cluster = StandaloneCluster(tmp_path / "cluster", hide=(staging, tmp_path / "data")).start()
    try:
        add_events(settings, 2_000, seed=92)
        env = {**lake_env, "SPARK_MASTER": cluster.url, "SPARK_LOCAL_IP": "127.0.0.1"}
        failed = run_cli("events_pipeline.py", "--run", env=env)
        assert cluster.executor_logs(), "no executor ran on the worker"
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert "source holds 2000 rows" in failed.stderr and str(staging) in failed.stderr
        assert "do not share this folder" in failed.stderr and "STAGING_WRITER=driver" in failed.stderr
        assert failed.stdout.strip().splitlines()[-1].startswith("Failed")
        assert data_snapshots(settings) == []
        # the same cluster, with the driver writing the staging files from Arrow: everything loads
        loaded = run_cli("events_pipeline.py", "--run", env={**env, "STAGING_WRITER": "driver"})
        assert loaded.returncode == 0, loaded.stdout + loaded.stderr
    finally:
        cluster.stop()
    assert_lake_equals_source(settings, expected_rows=2_000)
