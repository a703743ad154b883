"""Outages against a private Postgres the test starts and stops itself (never the shared one):
the source goes away while Spark reads; the run fails in plain words, marked temporary, with
nothing staged or promoted; after the server is back the next run loads everything."""

from __future__ import annotations

import json
import time

import pytest

from pipeline.settings import load_settings
from tests.conftest import run_cli, run_main
from tests.helpers import (
    Proc,
    add_events,
    assert_lake_equals_source,
    data_snapshots,
    staging_folder,
    wait_for_slow_reads,
)
from tests.private_pg import PrivatePostgres


@pytest.fixture
def private_source(tmp_path, lake_env):
    server = PrivatePostgres("outage-pw").init()
    server.create_db("src")
    env = {**lake_env, "SOURCE_PG_DSN": server.url("src")}
    yield server, env
    server.destroy()


def test_source_lost_mid_extraction_fails_plainly_and_the_next_run_loads_everything(private_source, tmp_path):
    server, env = private_source
    settings = load_settings(env)
    add_events(settings, 500, seed=91)
    # every read slice sleeps 30 s in Postgres first, so the read is surely running when the
    # server goes down
    run = Proc("tests/faulty_cli.py", "--run", env={**env, "EVENT_LAKE_TEST_FAULT": "slow-read"})
    run.wait_for("extracting 500 rows")
    wait_for_slow_reads(env["SOURCE_PG_DSN"])  # past the Spark session start, inside the 30 s read
    server.stop("immediate")
    code = run.popen.wait(timeout=120)
    output = "\n".join(run.lines)
    assert code == 1, output
    # the wording depends on where the read was when the server went ("lost … mid-read" or "Lost
    # … consuming input failed" while planning): assert what a user needs, not one phrasing
    assert "failed (temporary" in output.lower(), output
    assert "the source postgres at postgresql://postgres:***@127.0.0.1" in output.lower(), output
    assert "Traceback" not in output and "outage-pw" not in output
    assert not list((tmp_path / "staging").rglob("_manifest.json"))
    assert data_snapshots(settings) == []

    server.start()
    rerun = run_main("--run", env=env)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert_lake_equals_source(settings, expected_rows=500)


def test_catalog_lost_as_promotion_begins_is_a_temporary_error_naming_it(lake_env):
    """The catalog's connections are cut between opening the lake and the promotion's
    transaction: a plain temporary error naming the catalog (not "unexpected error"), the batch
    stays staged, and once the catalog is back it is promoted, exactly once."""
    from pipeline import staging
    from pipeline.errors import CatalogUnavailable
    from pipeline.lake.connect import connect
    from pipeline.lake.session import Lake
    from pipeline.load import run as running
    from pipeline.settings.resolve import resolve
    from tests.helpers import catalog_through_proxy
    from tests.helpers import run as run_once

    proxy, env = catalog_through_proxy(lake_env)
    settings = resolve(load_settings(env))
    add_events(settings, 300, seed=92)
    run_once(settings, mode="extract", engine="dlt")
    [batch] = staging.complete_batches(staging_folder(settings))
    con = connect(settings)
    try:
        proxy.stop(admit=1)  # the promotion's lock gets through, the lake's reconnect does not
        with pytest.raises(CatalogUnavailable) as lost:
            running.promote_staged_group(settings, Lake.of(con, settings), batch.manifest.group or batch.batch_id,
                                         batch.manifest.group_batches or {})
    finally:
        con.close()
    assert f"Lost the lake catalog (DUCKLAKE_CATALOG={settings.catalog.describe()}) during promotion" \
        in str(lost.value)
    assert staging.failed_batches(staging_folder(settings)) == []  # not set aside as poison
    proxy.start()
    rerun = run_main("--run", "--engine", "dlt", env=env)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert_lake_equals_source(settings, expected_rows=300)
    assert len(data_snapshots(settings)) == 1
    proxy.stop()


def test_status_with_the_catalog_down_is_failing_with_the_catalog_named(lake_env):
    """README: exit 2 (failing) when the lake cannot be read, as when the source cannot be."""
    from tests.helpers import catalog_through_proxy

    proxy, env = catalog_through_proxy(lake_env)
    add_events(load_settings(env), 50, seed=93)
    assert run_main("--run", "--engine", "dlt", env=env).returncode == 0
    proxy.stop()
    try:
        down = run_cli("events_pipeline.py", "--status", "--json", env=env, timeout=120)
    finally:
        proxy.start()
        proxy.stop()
    assert down.returncode == 2, down.stdout + down.stderr
    status = json.loads(down.stdout)
    assert status["health"]["state"] == "failing" and status["lake_readable"] is False
    assert "the lake cannot be read" in status["health"]["reasons"][0]
    assert "DUCKLAKE_CATALOG" in status["health"]["reasons"][0]
    assert "Traceback" not in down.stderr and "unexpected" not in down.stderr


def test_a_continuous_generator_outlives_a_source_restart(private_source):
    """A continuous writer retries with backoff and says so, as the applications it stands for
    do: it exited 1 on "terminating connection due to administrator command"."""
    import psycopg

    server, env = private_source
    gen = Proc("insert_event_data_loop.py", "--continuous", "--rows", "100", "--delay", "0.3",
               "--workers", "1", env=env)
    try:
        gen.wait_for("loop 2: committed", timeout=60)
        server.stop("fast")
        retrying = gen.wait_for("source unavailable", timeout=60)
        server.start()
        gen.wait_for("loop", timeout=60, after=retrying + 1)
    finally:
        code = gen.terminate(timeout=60)
    assert code == 0, gen.output
    assert "retrying in" in gen.lines[retrying]
    last = gen.lines[-1]
    assert last.startswith("Generator stopped by signal:"), gen.output
    committed = int(last.split(": ")[1].split()[0])
    with psycopg.connect(env["SOURCE_PG_DSN"]) as conn:
        assert conn.execute("SELECT count(*) FROM public.events").fetchone()[0] == committed


def test_a_catalog_lost_inside_commit_is_temporary_and_the_batch_is_not_set_aside(lake_env):
    """The catalog stopped (-m immediate) while a batch commits: DuckDB says "Failed to commit:
    Failed to execute query "ROLLBACK": " — a lost connection, which a retry outlives; the batch
    was set aside (--status FAILING until someone ran --retry-failed)."""
    import psycopg

    server = PrivatePostgres("commit-pw").init()
    try:
        server.create_db("cat")
        env = {**lake_env, "DUCKLAKE_CATALOG": server.url("cat")}
        settings = load_settings(env)
        add_events(settings, 100, seed=94)
        assert run_main("--run", "--engine", "dlt", env=env).returncode == 0
        with psycopg.connect(server.url("cat"), autocommit=True) as conn:  # every commit now waits 4 s
            conn.execute("CREATE FUNCTION lake.slow() RETURNS trigger LANGUAGE plpgsql AS "
                         "$$ BEGIN PERFORM pg_sleep(4); RETURN NEW; END $$")
            conn.execute("CREATE TRIGGER slow BEFORE INSERT ON lake.ducklake_snapshot "
                         "FOR EACH ROW EXECUTE FUNCTION lake.slow()")
        add_events(settings, 200, seed=95)
        proc = Proc("events_pipeline.py", "--run", "--engine", "dlt", "--metrics-port", "0", env=env)
        proc.wait_for("staged batch", timeout=120)
        time.sleep(1.5)
        server.stop("immediate")
        code = proc.popen.wait(120)
        assert code == 1, proc.output
        assert "set aside" not in proc.output.lower() and "Failed (temporary" in proc.output, proc.output[-3000:]
        server.start()
        with psycopg.connect(server.url("cat"), autocommit=True) as conn:
            conn.execute("DROP TRIGGER slow ON lake.ducklake_snapshot")
        assert run_main("--run", "--engine", "dlt", env=env).returncode == 0
        assert_lake_equals_source(settings, expected_rows=300)
        assert run_main("--status", "--json", env=env).returncode == 0
    finally:
        server.destroy()


def test_a_load_past_load_timeout_is_cancelled_as_temporary_and_the_next_run_loads_everything(settings, lake_env,
                                                                                             tmp_path):
    """A read stuck in the source (here: every slice sleeps 30 s in Postgres) used to hold a load
    for as long as it stayed stuck. Past LOAD_TIMEOUT the job is cancelled: a temporary failure
    naming the bound, nothing staged or promoted, and the next run loads everything once."""
    from tests import faults

    add_events(settings, 300, seed=93)
    run = Proc("tests/faulty_cli.py", "--run", env={**lake_env, faults.ENV: "slow-read", "LOAD_TIMEOUT": "4s"})
    code = run.popen.wait(timeout=180)
    output = run.output
    assert code == 1, output[-3000:]
    assert "ran past LOAD_TIMEOUT (4s)" in output and "Failed (temporary" in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert not list((tmp_path / "staging").rglob("_manifest.json"))
    assert data_snapshots(settings) == []
    # the cancelled tasks' queries do not read on in Postgres (one more per retry of a follower)
    from pipeline.settings.resolve import resolve
    from tests.helpers import slow_reads_left

    assert slow_reads_left(resolve(settings).source_dsn.conninfo()) == 0

    rerun = run_main("--run", env=lake_env)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert_lake_equals_source(settings, expected_rows=300)
