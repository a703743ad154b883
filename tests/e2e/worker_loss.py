"""The scenario of a cluster whose only worker dies mid-load, as the driver or through a Spark
Connect server (tests/e2e/test_cluster_workers_lost.py and test_connect_workers_lost.py: two files,
so the two slow runs of it go to two test workers)."""

from __future__ import annotations

import time

from tests.conftest import run_cli
from tests.helpers import Proc, add_events, assert_lake_equals_source
from tests.spark_services import StandaloneCluster


def only_worker_dies(settings, lake_env, tmp_path, through: str) -> None:
    """The compose stack's only worker killed mid-load: the load hung 483 s, nothing logged and
    ``/healthz`` 200, until the worker came back (7 min 52 s under Spark Connect, the stack's way,
    where the executors were running the load's tasks when they went). Now, this process the
    cluster's driver or a Connect server's client: a warning naming the master within 15 s;
    while it waits, the follower's ``/healthz`` answers 503 "waiting for Spark executors at
    spark://…"; SPARK_EXECUTOR_WAIT after the loss (+15 s) the load fails as temporary, naming the
    master; so does a run started while no executor is left (its warm-up waited, silent, for ever);
    with a worker again the next run loads everything once."""
    import json

    from pipeline.settings.resolve import resolve
    from tests import faults
    from tests.helpers import http_get, wait_for_slow_reads
    from tests.spark_services import ConnectServer, free_port

    cluster = StandaloneCluster(tmp_path / "cluster").start()
    connect = ConnectServer(tmp_path / "connect", master=cluster.url) if through == "connect" else None
    follow = None
    try:
        spark = {"SPARK_REMOTE": connect.start().url} if connect else {"SPARK_MASTER": cluster.url}
        add_events(settings, 200, seed=97)
        port = free_port()
        env = {**lake_env, **spark, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_EXECUTOR_WAIT": "10s"}
        # the runs that must load wait as long as a busy host takes to give an application its first
        # executor (a 10 s wait failed the first run in CI); the give-ups below wait 10 s
        patient = {**env, "SPARK_EXECUTOR_WAIT": "5m"}
        # a healthy lake first: its last load a moment ago, so only the give-up can make it unhealthy
        first = run_cli("events_pipeline.py", "--run", env=patient)
        assert first.returncode == 0, first.stdout + first.stderr
        add_events(settings, 100, seed=98)
        follow = Proc("tests/faulty_cli.py", "--follow", "--every", "2s", "--metrics-port", str(port),
                      env={**env, faults.ENV: "slow-read"})
        wait_for_slow_reads(resolve(settings).source_dsn.conninfo())  # the executors run its tasks
        cluster.kill_worker()  # the only one: no executor is left, none comes
        killed = time.monotonic()
        deadline = killed + 120
        answer: tuple[int, str] = (0, "")
        while time.monotonic() < deadline:  # the observer refreshes every 10 s: poll until it says so
            answer = http_get(f"http://127.0.0.1:{port}/healthz")
            if f"waiting for Spark executors at {cluster.url}" in answer[1]:
                break
            time.sleep(0.5)
        code, body = answer
        assert code == 503 and f"waiting for Spark executors at {cluster.url}" in body, (answer, follow.output[-3000:])
        assert json.loads(body)["state"] != "healthy"
        warned = follow.wait_for(f"waiting for Spark executors at {cluster.url}", timeout=60)
        gave_up = follow.wait_for(f"No Spark executors for 10s at {cluster.url}", timeout=120)
        assert follow.times[warned] - killed < 15, follow.output[-3000:]
        assert follow.times[gave_up] - killed < 10 + 15, follow.output[-3000:]
        # the load gave up: never "healthy" again in between (an answer taken while it waited was
        # served as healthy for 7-12 s), first from the give-up itself, then from the lake's record
        code, body = http_get(f"http://127.0.0.1:{port}/healthz")
        assert code == 503, body
        while "a load gave up waiting" in body and time.monotonic() < deadline:
            time.sleep(0.5)
            code, body = http_get(f"http://127.0.0.1:{port}/healthz")
            assert code == 503, body
        assert "a load gave up waiting" not in body and json.loads(body)["state"] != "healthy", body
        assert follow.popen.poll() is None  # a temporary failure: the follower goes on
        assert follow.terminate() == 0, follow.output[-3000:]
        assert "job load failed after" in follow.output and "(temporary;" in follow.output, follow.output[-3000:]
        # a run started while no executor is left: its warm-up's jobs waited, silent, for ever
        started = time.monotonic()
        alone = run_cli("events_pipeline.py", "--run", env=env, timeout=120)
        assert alone.returncode != 0 and f"No Spark executors for 10s at {cluster.url}" in alone.stderr, \
            alone.stdout + alone.stderr
        assert time.monotonic() - started < 90
        cluster.add_worker()
        again = run_cli("events_pipeline.py", "--run", env=patient)
        assert again.returncode == 0, again.stdout + again.stderr
    finally:
        if follow is not None and follow.popen.poll() is None:
            follow.popen.kill()
        if connect is not None:
            connect.stop()
        cluster.stop()
    assert_lake_equals_source(settings, expected_rows=300)
