"""A standalone Spark cluster losing its workers: a worker killed mid-extraction loses nothing, and a
load whose only worker died fails naming the master instead of waiting for ever, whether this
process is the cluster's driver or a Spark Connect server's client (apart from test_cluster.py so
the slow files run on several test workers)."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.e2e.worker_loss import only_worker_dies
from tests.helpers import Proc, add_events, assert_lake_equals_source
from tests.spark_services import StandaloneCluster

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")


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


def test_a_load_whose_only_worker_died_fails_naming_the_master_and_healthz_says_so_while_it_waits(
        settings, lake_env, tmp_path):
    only_worker_dies(settings, lake_env, tmp_path, "driver")
