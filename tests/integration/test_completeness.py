"""The arrival column never decides whether a row is loaded: whatever a writer puts in
``created_at`` (a backfill's old time, a clock behind the database's, a business column, naive
times in another zone, a session the arrival mark cannot see), every row inside the look-back
is in the lake when the next run ends (real Postgres, Spark and DuckLake)."""

from __future__ import annotations

import time

import psycopg
import pytest

from pipeline.settings.resolve import resolve
from tests.helpers import (
    add_events,
    assert_lake_equals_source,
    events_table,
    lake_query,
    run,
    source_db,
    source_table,
)


def _insert(conn: psycopg.Connection, table: str, rows: int, created_at_sql: str,
            dated_sql: str = "now() - interval '1 minute'") -> None:
    conn.execute(f"INSERT INTO {table} (event_id, event_type, event_timestamp, details, created_at) "
                 f"SELECT gen_random_uuid(), 'click', {dated_sql}, '{{}}', {created_at_sql} "
                 f"FROM generate_series(1, {rows})")


# what ORMs, replays and backfills write into created_at, relative to the database's clock
WRITERS = {
    "a backfill carrying yesterday's time": "now() - interval '1 day'",
    "a business column dated 2019": "timestamptz '2019-06-01 12:00:00+00'",
}
# application clocks within SKEW_BOUND of the database's: the transaction id says the rows are new
SKEWED_CLOCKS = {
    "an app server clock 2 s behind": "clock_timestamp() - interval '2 seconds'",
    "an app server clock 30 s behind": "clock_timestamp() - interval '30 seconds'",
    "an app server clock 10 s ahead": "clock_timestamp() + interval '10 seconds'",
}


@pytest.mark.parametrize("writer", list(SKEWED_CLOCKS))
def test_rows_of_a_writer_with_its_own_clock_are_read_once_by_the_fast_path(settings, spark, writer):
    """No clock decides what is new: the transaction that wrote a row does. A skewed writer's rows
    are read once, by the fast path (was: the whole look-back, every load)."""
    add_events(settings, 300, seed=311)
    run(settings, spark=spark)
    add_events(settings, 20, seed=312)
    run(settings, spark=spark)
    table = source_table(settings)
    for _ in range(2):
        with source_db(settings) as conn:
            _insert(conn, table, 50, SKEWED_CLOCKS[writer])
        report = run(settings, spark=spark)
        assert (report.rows_inserted, report.rows_in_window, report.rows_behind_mark) == (50, 50, 0)
    assert run(settings, spark=spark).rows_in_window == 0
    assert_lake_equals_source(settings, expected_rows=420)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_rows_whose_created_at_is_behind_the_mark_reach_the_lake_on_the_next_run(settings, spark, writer,
                                                                                  caplog):
    add_events(settings, 300, seed=301)
    run(settings, spark=spark)
    add_events(settings, 20, seed=302)
    run(settings, spark=spark)  # the second load recorded an arrival mark: the fast path is on
    table = source_table(settings)
    with source_db(settings) as conn:
        _insert(conn, table, 50, WRITERS[writer])
    with caplog.at_level("WARNING"):
        report = run(settings, spark=spark)
    assert report.rows_inserted == 50
    assert report.rows_behind_mark == 50
    assert "50 row(s) dated inside the look-back arrived with created_at at or before" in caplog.text
    assert_lake_equals_source(settings, expected_rows=370)
    # the batch records what was behind (status and metrics sum it)
    assert lake_query(settings, "SELECT sum(rows_behind_mark) FROM lake.ops.batches") == [(50,)]
    # and the next run goes back to reading only new arrivals
    add_events(settings, 10, seed=303)
    assert run(settings, spark=spark).rows_in_window == 10


def test_rows_stamped_far_ahead_are_read_once_and_a_backfill_after_them_is_loaded(settings, spark):
    """Rows whose created_at is an hour ahead of the database's clock were read by every load
    (always "new" by their clock); their transaction id says they are not. 20 backfilled rows
    after them are found by the count before extraction and read with the whole look-back."""
    add_events(settings, 200, seed=304)
    run(settings, spark=spark)
    table = source_table(settings)
    with source_db(settings) as conn:
        _insert(conn, table, 30, "now() + interval '1 hour'")  # a writer clock an hour ahead
    assert run(settings, spark=spark).rows_inserted == 30
    with source_db(settings) as conn:
        _insert(conn, table, 20, "now() - interval '1 day'")
    report = run(settings, spark=spark)
    assert (report.rows_inserted, report.rows_behind_mark) == (20, 20)
    assert len(report.promotions) == 1  # the whole look-back at once
    assert (check := report.tables["events"].check) is not None and check.exact
    assert run(settings, spark=spark).rows_in_window == 0  # the rows stamped ahead are not read again
    assert_lake_equals_source(settings, expected_rows=250)


def test_a_writer_session_with_track_activities_off_is_not_lost(settings, spark):
    """Its transaction's start is invisible to pg_stat_activity (xact_start NULL), so the arrival
    mark moves past its rows while it is open; the count after it commits finds them."""
    add_events(settings, 200, seed=305)
    run(settings, spark=spark)
    table = source_table(settings)
    with source_db(settings, autocommit=False) as hidden:
        hidden.execute("SET track_activities = off")
        _insert(hidden, table, 40, "now()")  # created_at: this transaction's start
        time.sleep(0.5)
        for seed in (306, 307):
            add_events(settings, 10, seed=seed)
            assert run(settings, spark=spark).rows_inserted == 10
        hidden.commit()
    report = run(settings, spark=spark)
    # its transaction id is newer than the last plan's snapshot saw: read by the fast path
    assert (report.rows_inserted, report.rows_behind_mark) == (40, 0)
    assert_lake_equals_source(settings, expected_rows=260)


def test_naive_created_at_written_in_another_zone_is_not_lost(settings, spark):
    """A naive ``created_at`` means wall-clock time in the zone the pipeline reads in (Tokyo,
    the database's); a writer session in UTC stamps its rows nine hours behind."""
    dsn = resolve(settings).source_dsn
    table = source_table(settings)
    add_events(settings, 100, seed=308)
    with source_db(settings) as conn:
        conn.execute(f"ALTER DATABASE {dsn.dbname} SET timezone = 'Asia/Tokyo'")
        conn.execute(f"ALTER TABLE {table} ALTER created_at TYPE timestamp USING created_at AT TIME ZONE "
                     "'Asia/Tokyo', ALTER created_at SET DEFAULT localtimestamp")
    run(settings, spark=spark)
    add_events(settings, 10, seed=309)
    run(settings, spark=spark)
    with source_db(settings) as utc_writer:
        utc_writer.execute("SET TimeZone = 'UTC'")
        _insert(utc_writer, table, 25, "localtimestamp")
    report = run(settings, spark=spark)
    assert (report.rows_inserted, report.rows_behind_mark) == (25, 25)
    assert_lake_equals_source(settings, expected_rows=135)


def test_status_and_doctor_name_an_arrival_column_the_database_does_not_set(settings, spark):
    """A business column: NOT NULL, no default, dates from 2019. Every late row still loads,
    and --status, /metrics and doctor say why loads read the whole look-back."""
    from pipeline.ops.doctor import WARN, Doctor
    from pipeline.ops.status import collect

    resolved = resolve(settings)
    table = source_table(resolved)
    add_events(settings, 100, seed=310)
    with source_db(settings) as conn:
        conn.execute(f"ALTER TABLE {table} ALTER created_at DROP DEFAULT, ALTER created_at SET NOT NULL")
    run(settings, spark=spark)
    with source_db(settings) as conn:
        _insert(conn, table, 15, "timestamptz '2019-06-01 12:00:00+00'", "now() - interval '10 seconds'")
    run(settings, spark=spark)
    with source_db(settings) as conn:
        _insert(conn, table, 15, "timestamptz '2019-06-01 12:00:00+00'", "now() - interval '5 seconds'")
    assert run(settings, spark=spark).rows_inserted == 15
    assert_lake_equals_source(settings, expected_rows=130)
    status = collect(resolved)
    arrivals = status.arrivals
    assert arrivals.set_by_database is False
    assert arrivals.rows_behind_mark_last_hour == 30
    assert "Nothing is lost" in arrivals.note and "created_at behind the arrival mark" in arrivals.note
    assert status.health.state == "healthy"  # handled, not a fault
    check = Doctor(resolved).source()
    assert check.status == WARN and "created_at is not set by the database" in check.detail
    assert "SET DEFAULT now()" in check.hint


def test_rows_deleted_or_moved_in_the_source_after_loading_make_status_failing(settings, spark):
    from pipeline.ops.status import collect

    resolved = resolve(settings)
    add_events(settings, 200, seed=311)
    run(settings, spark=spark)
    assert collect(resolved).health.state == "healthy"
    with source_db(settings) as conn:
        conn.execute(f"DELETE FROM {source_table(resolved)} WHERE event_id IN "
                     f"(SELECT event_id FROM {source_table(resolved)} ORDER BY event_id LIMIT 3)")
    status = collect(resolved)
    assert status.lake_rows_not_in_source == 3
    assert status.health.state == "failing"
    [reason] = status.health.reasons
    assert "3 row(s) dated in the look-back that the source no longer has" in reason and "Pipeline.repair()" in reason


def test_reconcile_finds_a_missing_row_that_a_doubled_id_hides_from_hourly_counts(settings, spark):
    from datetime import UTC, datetime, timedelta

    from pipeline.lake.connect import lake_session
    from pipeline.load.reconcile import reconcile

    resolved = resolve(settings)
    add_events(settings, 300, seed=312, now=datetime.now(UTC) - timedelta(hours=3))  # before the look-back
    add_events(settings, 10, seed=313)
    run(settings, spark=spark)
    events = events_table(resolved)
    with lake_session(resolved) as con:
        [[hour]] = con.execute(f"SELECT date_trunc('hour', event_timestamp) FROM {events} GROUP BY 1 "
                               "ORDER BY count(*) DESC LIMIT 1").fetchall()
        [lost, doubled] = [r[0] for r in con.execute(
            f"SELECT event_id FROM {events} WHERE date_trunc('hour', event_timestamp) = ? "
            "ORDER BY event_id LIMIT 2", [hour]).fetchall()]
        con.execute("BEGIN")
        con.execute(f"DELETE FROM {events} WHERE event_id = ?", [lost])
        con.execute(f"INSERT INTO {events} SELECT * FROM {events} WHERE event_id = ?", [doubled])
        con.execute("COMMIT")
    report = reconcile(resolve(settings), since="all")
    assert report.rows_backfilled == 1
    assert report.lake_ids_doubled == 1
    assert "1 lake row(s) repeat an id" in report.summary()
    assert lake_query(settings, f"SELECT count(*) FROM lake.main.events WHERE event_id = '{lost}'") == [(1,)]


def test_a_source_without_a_primary_key_resending_an_id_later_keeps_one_row_per_id(settings, spark):
    """README supports sources without a primary key: the same event_id sent again with a new
    event_timestamp, in a later batch, is not loaded twice (the batch's time range alone would
    not find the first copy, dated before the look-back)."""
    table = source_table(settings)
    add_events(settings, 10, seed=21)  # creates the table
    with source_db(settings) as conn:
        conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT events_pkey")
        _insert(conn, table, 90, "now() - interval '2 hours'", dated_sql="now() - interval '2 hours'")
    run(settings)
    with source_db(settings) as conn:
        conn.execute(f"INSERT INTO {table} (event_id, event_type, event_timestamp, details, created_at) "
                     f"SELECT event_id, event_type, now(), details, now() FROM {table} "
                     "WHERE event_timestamp < now() - interval '1 hour' LIMIT 5")  # resent, re-dated
    report = run(settings)
    assert report.rows_inserted == 0
    [(rows, ids)] = lake_query(settings, "SELECT count(*), count(DISTINCT event_id) FROM lake.main.events")
    assert rows == ids == 100
    from pipeline.load.reconcile import reconcile

    reconcile(resolve(settings), "all")  # the re-sent rows' hour differs by count; their ids are in the lake
    [(rows, ids)] = lake_query(settings, "SELECT count(*), count(DISTINCT event_id) FROM lake.main.events")
    assert rows == ids == 100


def test_a_second_source_with_the_same_table_name_is_refused_with_the_fix(lake_env, cli):
    """tenant_a.events, then tenant_b.events into the same lake: one lake table, one watermark —
    tenant_b's older rows would never load. The second is refused and nothing is read."""
    from pipeline.settings import load_settings

    envs = {t: {**lake_env, "SOURCE_TABLE": f"{t}.events"} for t in ("tenant_a", "tenant_b")}
    first = load_settings(envs["tenant_a"])
    with source_db(first) as conn:
        for tenant in envs:
            conn.execute(f"CREATE SCHEMA {tenant}")
    for tenant, rows in (("tenant_a", 80), ("tenant_b", 120)):
        add_events(load_settings(envs[tenant]), rows, seed=len(tenant) + rows)
    assert cli("--run", "--engine", "dlt", env=envs["tenant_a"]).returncode == 0
    refused = cli("--run", "--engine", "dlt", env=envs["tenant_b"])
    assert refused.returncode == 1
    assert "holds the events of" in refused.stderr and "tenant_a.events" in refused.stderr
    assert "another DUCKLAKE_NAME" in refused.stderr
    [(rows,)] = lake_query(first, "SELECT count(*) FROM lake.main.events")
    assert rows == 80  # nothing of tenant_b's was loaded into tenant_a's table
    own = {**envs["tenant_b"], "DUCKLAKE_NAME": "tenant_b_lake",
           "DUCKLAKE_DATA_PATH": lake_env["DUCKLAKE_DATA_PATH"].rstrip("/") + "-b/"}
    assert cli("--run", "--engine", "dlt", env=own).returncode == 0
    assert_lake_equals_source(load_settings(own), expected_rows=120)


def test_reconcile_leaves_the_look_back_to_the_loads(settings):
    """Rows dated inside the look-back that arrive after a load are the next load's: a reconcile
    between the two (a follower's first one) neither backfills them nor calls them late."""
    from datetime import timedelta

    from pipeline.load.reconcile import reconcile

    add_events(settings, 100, seed=41)
    run(settings, engine="dlt")
    add_events(settings, 20, seed=42, late_by=timedelta(minutes=5))
    report = reconcile(resolve(settings), "all")
    assert report.rows_backfilled == 0 and report.hours_differing == []
    assert run(settings, engine="dlt").rows_inserted == 20
    assert_lake_equals_source(settings, expected_rows=120)


def test_a_source_that_deletes_its_old_rows_keeps_them_in_the_lake_and_no_command_calls_them_lost(
        lake_env, spark):
    """A source that keeps 3 days (it deletes older rows itself): --reconcile reported the lake's
    kept rows as 'not in the source' on every run, --verify said the lake differs for good, and
    --repair deleted the lake's history. SOURCE_RETENTION says how far back the source is
    complete: older rows are the lake's history, which no comparison counts as deleted."""
    from pipeline.ops.pipeline import Pipeline
    from pipeline.settings import load_settings

    plain = load_settings(lake_env)
    with source_db(plain) as conn:
        add_events(plain, 100, seed=331)
        _insert(conn, source_table(plain), 40, "now() - interval '5 days'", "now() - interval '5 days'")
    run(plain, spark=spark)
    with source_db(plain) as conn:  # the source's own retention job
        conn.execute(f"DELETE FROM {source_table(plain)} WHERE event_timestamp < now() - interval '3 days'")
    add_events(plain, 10, seed=332)
    kept = load_settings({**lake_env, "SOURCE_RETENTION": "3d"})
    assert run(kept, spark=spark).rows_inserted == 10
    with Pipeline(kept) as pipeline:
        reconciled = pipeline.reconcile()
        assert reconciled.lake_rows_not_in_source == 0, reconciled.summary()
        assert pipeline.verify().equal
        repaired = pipeline.repair(None)
        assert repaired.rows_removed == 0 and repaired.exact
    assert lake_query(kept, f"SELECT count(*) FROM {events_table(kept)} "
                            "WHERE event_timestamp < now() - interval '3 days'") == [(40,)]
    with Pipeline(plain) as pipeline:  # without the setting the same lake differs: the rows are real
        assert pipeline.reconcile().lake_rows_not_in_source == 40
        assert not pipeline.verify().equal
