"""--status as a health check: exit 0 healthy, 1 stale, 2 failing, from the lake's own history
(scheduled and manual runs alike)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from pipeline import staging
from pipeline.ops.health import FAILING, HEALTHY, STALE, assess
from pipeline.settings.resolve import resolve
from pipeline.source.window import Window
from tests.conftest import run_main
from tests.helpers import add_events, age_load_history, jobs_table, lake_query, staging_folder

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _status(env) -> tuple[int, dict]:
    result = run_main("--status", "--json", env=env)
    return result.returncode, json.loads(result.stdout)


def test_status_exit_codes_follow_manual_runs_and_set_aside_batches(settings, lake_env, cli):
    add_events(settings, 40, seed=1)
    # long enough that a slow machine's --status (a few seconds) still finds the run fresh
    env = {**lake_env, "LOAD_EVERY": "10s"}
    assert _status(env)[0] == STALE  # rows waiting, never loaded
    assert cli("--run", "--engine", "dlt", env=env).returncode == 0
    code, status = _status(env)
    assert code == HEALTHY and status["health"]["last_successful_load"], status["health"]
    # the manual run is in the job history like a scheduled one
    assert lake_query(settings, f"SELECT job, status FROM {jobs_table(settings)}") == [("load", "success")]
    age_load_history(settings, timedelta(seconds=21))  # two LOAD_EVERY intervals without a load
    code, status = _status(env)
    assert code == STALE and "ago (LOAD_EVERY 10s)" in status["health"]["reasons"][0]
    resolved = resolve(settings)
    folder = staging.batch_dir(staging_folder(resolved), staging.new_batch_id())
    folder.make(exist_ok=False)
    batch = staging.seal(folder, batch_id=folder.name.removeprefix(staging.PREFIX), table="events", engine="dlt",
                         window=Window(None, NOW), row_count=0, files=[])
    staging.set_aside(staging_folder(resolved), batch, "unreadable file")
    text = cli("--status", env=env)
    assert text.returncode == FAILING, text.stdout + text.stderr
    assert text.stdout.startswith("health          FAILING: events: 1 batch(es) set aside")
    assert text.stdout.strip().splitlines()[-1].startswith("Status: failing (events: 1 batch(es) set aside")


def test_a_row_dated_ahead_is_no_lag_and_makes_the_lake_stale_with_a_hint_only_within_a_zone(settings):
    """A row dated hours ahead looks like a naive time written in another zone: stale, with the hint.
    One dated past the horizon (9999) is a bad value the next load quarantines, not a row to wait
    for: one bad date must not keep the health check stale until then."""
    import psycopg

    from pipeline.ops.status import collect
    from tests.helpers import run

    add_events(settings, 50, seed=1)
    run(settings, engine="dlt")
    resolved = resolve(settings)
    with psycopg.connect(resolved.source_dsn.conninfo(), autocommit=True) as conn:
        conn.execute("INSERT INTO events (event_id, event_type, event_timestamp, details) "
                     "VALUES (gen_random_uuid(), 'api_request', '9999-12-31 00:00:00+00', '{}')")
        status = collect(resolved)
        assert status.lag_seconds is not None and status.lag_seconds < 3600  # not 7,973 years
        assert status.source_rows_in_future == 0 and status.health.state == "healthy", status.health
        conn.execute("INSERT INTO events (event_id, event_type, event_timestamp, details) "
                     "VALUES (gen_random_uuid(), 'api_request', now() + interval '9 hours', '{}')")
    status = collect(resolved)
    assert status.source_rows_in_future == 1
    assert status.health.state == "stale"
    assert any("SOURCE_TIMEZONE" in reason for reason in status.health.reasons)
    now = datetime.now(UTC)
    assert assess(now, timedelta(hours=1), now, "success", None, 0, 1, far_future=0).code == HEALTHY


def test_staleness_is_judged_by_the_interval_the_last_scheduler_ran_with(settings):
    """A stopped ``--load-every 30s`` scheduler whose last load was 3 minutes ago: stale, even
    for a process whose LOAD_EVERY is the default hour."""
    from pipeline.lake import jobs
    from pipeline.ops.status import collect

    add_events(settings, 30, seed=3)  # rows waiting
    resolved = resolve(settings)
    finished = datetime.now(UTC) - timedelta(minutes=3)
    jobs.JobHistory(resolved).write(jobs.JobRecord("load", finished - timedelta(seconds=2), finished,
                                                   jobs.JobStatus.SUCCESS, None, {"every_seconds": 30.0},
                                                   run_id="sched-1"))
    status = collect(resolved)
    assert status.health.state == "stale", status.health
    assert "LOAD_EVERY 30s" in status.health.reasons[0]
    jobs.JobHistory(resolved).write(jobs.JobRecord("load", datetime.now(UTC), datetime.now(UTC),
                                                   jobs.JobStatus.SUCCESS, None, {}, run_id="manual-1"))
    assert collect(resolved).health.state == "healthy"  # a manual run: judged by LOAD_EVERY (1h)


def test_metrics_during_a_catalog_outage_keep_the_lake_series_and_fail(lake_env):
    """/metrics dropped every lake series while the catalog was down (only up 0 was left), so
    README's alerts (health > 0, the last-success age) returned nothing for the outage's length."""
    import time

    from pipeline.ops.metrics import families
    from pipeline.ops.observe import Observer
    from pipeline.settings import load_settings
    from tests.helpers import catalog_through_proxy

    proxy, env = catalog_through_proxy(lake_env)
    settings = resolve(load_settings(env))
    add_events(settings, 40, seed=97)
    assert run_main("--run", "--engine", "dlt", env=env).returncode == 0
    observer = Observer(settings, ttl=0)

    def gauges() -> dict[str, float]:
        return {s.name: s.value for f in families(observer.latest()) for s in f.samples if not s.labels}

    try:
        before = gauges()
        assert before["event_lake_up"] == 1 and before["event_lake_health"] == 0
        proxy.stop()
        from pipeline.lake import instances

        instances.drop_all()  # the process's open catalog connections go with the server
        deadline = time.monotonic() + 60
        while gauges()["event_lake_up"] != 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        during = gauges()
    finally:
        observer.close()
        proxy.start()
        proxy.stop()
    assert during["event_lake_up"] == 0 and during["event_lake_health"] == 2
    assert during["event_lake_lake_rows"] == 40  # the last values stay
    assert during["event_lake_seconds_since_successful_load"] >= before["event_lake_seconds_since_successful_load"]


def test_a_probe_asked_rarely_gets_a_fresh_answer(settings, lake_env):
    """/healthz was refreshed only when a request found it older than 10 s, and that request got the
    old answer (it said 3 s since the last load when it was 163 s). Refreshed on a timer, one
    request after a long silence reads a fresh observation, counted to the moment it is asked."""
    import time

    from pipeline.ops.observe import Observer

    add_events(settings, 30, seed=98)
    assert run_main("--run", "--engine", "dlt", env=lake_env).returncode == 0
    observer = Observer(resolve(settings), ttl=0.5).start()
    try:
        first = observer.latest().status
        assert first is not None and first.health.seconds_since_success is not None
        age_load_history(settings, timedelta(seconds=200))
        taken = observer.refreshes
        deadline = time.monotonic() + 60
        while observer.refreshes < taken + 2 and time.monotonic() < deadline:  # no request meanwhile
            time.sleep(0.1)
        answer = observer.latest().status  # the only request since the history aged
        assert answer is not None and answer.health.seconds_since_success >= 200, answer.health
    finally:
        observer.close()


def test_a_slow_reading_of_the_lake_keeps_healthz_200_with_the_answers_age(settings, lake_env):
    """A host under load: the stack's readiness probe failed a healthy pipeline with "this answer is
    52s old" while --verify said lake == source. The catalog held by a lock the observer's reading
    waits on: /healthz stays 200, saying the answer's age and that reading is slow."""
    import time
    import urllib.request
    from dataclasses import replace

    import psycopg

    from pipeline.ops.observe import OVERDUE_INTERVALS, Observer
    from pipeline.ops.web import WebServer

    add_events(settings, 30, seed=99)
    assert run_main("--run", "--engine", "dlt", env=lake_env).returncode == 0
    resolved = resolve(settings)
    served = replace(resolved, metrics_host="127.0.0.1", metrics_port_text="0")
    observer = Observer(resolved, ttl=0.5).start()
    web = WebServer(served, observer).start()
    try:
        assert observer.latest().status.health.code == HEALTHY
        with psycopg.connect(lake_env["DUCKLAKE_CATALOG"]) as catalog:  # held until the block ends
            catalog.execute(f"LOCK TABLE {resolved.lake_name}.ducklake_snapshot IN ACCESS EXCLUSIVE MODE")
            taken, deadline = observer.refreshes, time.monotonic() + 60
            answer = observer.latest()
            while answer.age_seconds <= OVERDUE_INTERVALS * 0.5 + 1 and time.monotonic() < deadline:
                time.sleep(0.1)
                answer = observer.latest()
            assert observer.refreshes == taken  # the reading waits on the lock: no new answer
            with urllib.request.urlopen(web.url + "healthz", timeout=30) as response:
                body = json.loads(response.read())
                assert response.status == 200, body
            assert body["state"] == "healthy" and body["answer_age_seconds"] > OVERDUE_INTERVALS * 0.5, body
            assert "reading the lake and the source is slow" in body["slow"], body
            catalog.rollback()
    finally:
        web.stop()
        observer.close()
