"""A standalone Spark cluster from the pyspark package: the pipeline's tasks run on its worker,
and a worker that cannot see the driver's staging folder fails the run instead of losing rows."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.conftest import run_cli
from tests.helpers import Proc, add_events, assert_lake_equals_source, data_snapshots
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


def test_a_worker_killed_mid_extraction_loses_nothing(settings, lake_env, tmp_path):
    cluster = StandaloneCluster(tmp_path / "cluster").start()
    try:
        add_events(settings, 300_000, seed=96)
        env = {**lake_env, "SPARK_MASTER": cluster.url, "SPARK_LOCAL_IP": "127.0.0.1"}
        run = Proc("events_pipeline.py", "--run", env=env)
        run.wait_for("extracting 300000 rows", timeout=180)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
                "Running task" in log.read_text(errors="replace") for log in cluster.executor_logs()):
            time.sleep(0.2)  # the driver starts, the worker launches an executor, a task starts
        time.sleep(1)
        assert run.popen.poll() is None, "the extraction ended before the worker could be killed"
        cluster.kill_worker()  # its executor dies with it, mid-read or mid-write
        cluster.add_worker()  # the master hands the lost tasks to the new worker
        assert run.popen.wait(300) == 0, run.output
        master_log = (cluster.work / "master.log").read_text()
        assert master_log.index("Launching executor") < master_log.rindex("Removing worker")
    finally:
        cluster.stop()
    assert_lake_equals_source(settings, expected_rows=300_000)


def test_a_load_whose_only_worker_died_fails_naming_the_master_instead_of_waiting_forever(settings, lake_env,
                                                                                            tmp_path):
    """The compose stack's only worker killed mid-load: the load hung 483 s, nothing logged, until
    the worker came back. It now gives up after SPARK_EXECUTOR_WAIT, as temporary, naming the master;
    with a worker again the next run loads everything once."""
    from pipeline.settings.resolve import resolve
    from tests import faults
    from tests.helpers import wait_for_slow_reads

    cluster = StandaloneCluster(tmp_path / "cluster").start()
    run = None
    try:
        add_events(settings, 200, seed=97)
        env = {**lake_env, "SPARK_MASTER": cluster.url, "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_EXECUTOR_WAIT": "10s"}
        run = Proc("tests/faulty_cli.py", "--run", env={**env, faults.ENV: "slow-read"})
        wait_for_slow_reads(resolve(settings).source_dsn.conninfo())
        cluster.kill_worker()  # the only one: no executor is left, none comes
        started = time.monotonic()
        code = run.popen.wait(300)
        assert code == 1 and time.monotonic() - started < 120, run.output[-3000:]
        assert f"No Spark executors registered at {cluster.url} for 10s" in run.output, run.output[-3000:]
        assert "Failed (temporary" in run.output and "waiting for Spark executors" in run.output
        cluster.add_worker()
        again = run_cli("events_pipeline.py", "--run", env=env)
        assert again.returncode == 0, again.stdout + again.stderr
    finally:
        if run is not None and run.popen.poll() is None:
            run.popen.kill()
        cluster.stop()
    assert_lake_equals_source(settings, expected_rows=200)
