"""A user's own table with looser types: bad rows never crash a run and are never dropped
silently. They go to ops.quarantine with their reason, once; good rows load; lake == the
source's loadable rows; future-dated rows wait and are reported."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from pipeline.lake import validate
from pipeline.settings import load_settings
from pipeline.settings.resolve import resolve
from tests.conftest import NEEDS_JDBC_JAR
from tests.helpers import assert_lake_equals_source, data_snapshots, lake_query, run, staging_folder

LOOSE_TABLE = """
CREATE TABLE public.loose_events (event_id text, event_type text, event_timestamp timestamptz,
                                  details text, created_at timestamptz)
"""


def _loose_rows(now: datetime) -> tuple[list[tuple], dict[str, int]]:
    """50 good rows plus every kind of bad one; returns the rows and the expected reasons."""
    ts = now - timedelta(minutes=5)
    good = [(str(uuid.uuid4()), "api_request", ts - timedelta(seconds=i), f'{{"n": {i}}}', ts)
            for i in range(50)]
    same = uuid.uuid4()
    conflict = uuid.uuid4()
    rows = good + [
        (None, "user_login", ts, "{}", ts),                                 # NULL id
        ("not-a-uuid", "user_login", ts, "{}", ts),                         # not a UUID
        (str(uuid.uuid4()), "user_login", None, "{}", ts),                  # NULL timestamp
        (str(uuid.uuid4()), "user_login", "-infinity", "{}", ts),           # no time: stopped every run
        (str(uuid.uuid4()), "user_login", "infinity", "{}", ts),            # no time: waited for ever
        (str(uuid.uuid4()), "user_login", "0044-03-15 12:00:00+00 BC", "{}", ts),  # before year 1: no
        (str(uuid.uuid4()), "user_login", "294250-01-01 00:00:00+00", "{}", ts),   # datetime (every run
        # stopped), and past DuckDB's last instant (its reader wrapped it round to 290,279 BC)
        (str(uuid.uuid4()), "user_login", ts, "{bad", ts),                  # invalid JSON
        (str(uuid.uuid4()), "user_login", ts, "", ts),                      # empty JSON
        (str(uuid.uuid4()), None, ts, None, ts),                            # NULL type/details: loads
        (str(same), "feature_usage", ts, "{}", ts),                         # one id, three spellings,
        ("{" + str(same).upper() + "}", "feature_usage", ts, "{}", ts),     # same contents: plain
        (" " + str(same).replace("-", "") + " ", "feature_usage", ts, "{}", ts),  # duplicates
        (str(conflict), "payment_processed", ts, '{"v": 1}', ts - timedelta(minutes=1)),  # loses
        (str(conflict), "payment_processed", ts, '{"v": 2}', ts),           # newest created_at wins
        (str(uuid.uuid4()), "user_login", datetime(2099, 1, 1, tzinfo=UTC), "{}", ts),  # past the horizon
    ]
    reasons = {validate.REASON_NULL_ID: 1, validate.REASON_BAD_ID: 1, validate.REASON_NULL_TS: 6,
               validate.REASON_BAD_JSON: 2, validate.REASON_CONFLICT: 1}
    return rows, reasons


@pytest.mark.parametrize("engine", ["spark", "dlt", pytest.param("spark-jdbc", marks=NEEDS_JDBC_JAR)])
def test_bad_rows_are_quarantined_once_and_good_rows_load(lake_env, spark, engine):
    # the JDBC reader split in three (on the time column as the source holds it: ±infinity too)
    jdbc = {"SPARK_READER": "jdbc", "SPARK_PARTITIONS": "3"} if engine == "spark-jdbc" else {}
    engine = engine.removesuffix("-jdbc")
    settings = load_settings({**lake_env, "SOURCE_TABLE": "public.loose_events", **jdbc})
    dsn = resolve(settings).source_dsn
    with psycopg.connect(dsn.conninfo(), autocommit=True) as conn:
        conn.execute(LOOSE_TABLE)
        now = conn.execute("SELECT now()").fetchone()[0]
        rows, reasons = _loose_rows(now)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO public.loose_events VALUES (%s, %s, %s, %s, %s)", rows)

    report = run(settings, engine=engine, spark=spark)
    # good, NULL type, the thrice-spelled id, the winner; the row dated 2099 (written in the same
    # transaction, executemany) is past the horizon: a bad value, quarantined, not read with the rest
    assert report.rows_inserted == 50 + 1 + 1 + 1
    assert report.rows_quarantined == sum(reasons.values())
    assert report.rows_in_future == 0
    quarantined = dict(lake_query(settings, "SELECT reason, count(*) FROM lake.ops.quarantine GROUP BY ALL"))
    assert quarantined == reasons
    [(kept,)] = lake_query(settings, "SELECT details::VARCHAR FROM lake.main.loose_events "
                                     "WHERE event_type = 'payment_processed'")
    assert kept == '{"v": 2}'
    assert lake_query(settings, "SELECT event_id FROM lake.ops.quarantine WHERE reason = ?",
                      [validate.REASON_BAD_ID]) == [("not-a-uuid",)]
    assert_lake_equals_source(settings, expected_rows=53)  # the loadable rows, up to now

    snapshots = data_snapshots(settings)
    again = run(settings, engine=engine, spark=spark)  # the look-back re-reads every bad row
    assert again.rows_inserted == 0 and again.rows_quarantined == 0
    assert data_snapshots(settings) == snapshots
    assert lake_query(settings, "SELECT count(*) FROM lake.ops.quarantine")[0][0] == sum(reasons.values())


def test_a_batch_that_cannot_be_promoted_is_set_aside_and_retried_after_the_fix(settings, lake_env, tmp_path, cli):
    """A corrupt staged file fails only its own batch: it is moved aside whole, later events
    load, --status shows it with the error, and --retry-failed loads it once the file is fixed."""
    import json
    import shutil
    from pathlib import Path

    from pipeline import staging
    from tests.helpers import add_events

    add_events(settings, 300, seed=81)
    assert cli("--extract-only", "--engine", "dlt", env=lake_env).returncode == 0
    [batch] = staging.complete_batches(staging_folder(settings))
    part = Path(batch.folder.path) / batch.manifest.files[0]
    shutil.copy(part, tmp_path / "good.parquet")
    part.write_bytes(b"PAR1 this is not parquet")

    add_events(settings, 50, seed=83)
    failed = cli("--run", "--engine", "dlt", env=lake_env)
    output = failed.stdout + failed.stderr
    assert failed.returncode == 1, output
    assert "set aside" in output and "--retry-failed" in output and "Traceback" not in output
    assert_lake_equals_source(settings, expected_rows=350)  # the next batch loaded past the broken one
    status = cli("--status", env=lake_env)
    assert f"SET ASIDE       batch {batch.batch_id}" in status.stdout, status.stdout + status.stderr

    aside = Path(staging_folder(settings).path) / staging.FAILED / batch.folder.name
    assert json.loads((aside / staging.FAILURE).read_text())["batch_id"] == batch.batch_id
    shutil.copy(tmp_path / "good.parquet", aside / part.name)  # the operator's fix
    retried = cli("--retry-failed", "--engine", "dlt", env=lake_env)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert "already" in retried.stdout + retried.stderr or "no new rows" in retried.stdout + retried.stderr
    assert staging.failed_batches(staging_folder(settings)) == []
    assert_lake_equals_source(settings, expected_rows=350)


@pytest.mark.parametrize(("db_zone", "source_timezone", "engine"), [
    ("Asia/Tokyo", None, "spark"),  # UTC+9: read as UTC these rows were "future-dated" for 9 hours
    ("America/New_York", None, "dlt"),  # UTC-5: read as UTC they loaded 5 hours off
    ("UTC", "Asia/Tokyo", "spark"),  # SOURCE_TIMEZONE names the zone the writer meant
    # POSIX zones, which Postgres accepts: DuckDB knew neither ("Unknown TimeZone" in --verify), and
    # read UTC+3 as three hours east where Postgres means west
    ("EST5EDT,M3.2.0,M11.1.0", None, "dlt"),
    ("UTC+3", None, "dlt"),
])
def test_naive_timestamps_are_wall_clock_time_in_the_source_zone(lake_env, spark, db_zone, source_timezone,
                                                                 engine):
    """``timestamp without time zone`` means what Postgres means by it: wall-clock time in the
    database's TimeZone (or SOURCE_TIMEZONE). Planning, every reader, --status and --verify
    take it so, and the lake holds the true instants."""
    from pipeline.ops.status import collect

    env = {**lake_env, "SOURCE_TABLE": "public.naive_events"}
    if source_timezone:
        env["SOURCE_TIMEZONE"] = source_timezone
    settings = load_settings(env)
    dsn = resolve(settings).source_dsn
    writer_zone = source_timezone or db_zone
    with psycopg.connect(dsn.conninfo(), autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dsn.dbname}" SET timezone TO \'{db_zone}\'')
    with psycopg.connect(dsn.with_timezone(None).conninfo(), autocommit=True) as conn:
        conn.execute("CREATE TABLE public.naive_events (event_id uuid, event_type text, "
                     "event_timestamp timestamp, details jsonb, created_at timestamp)")
        conn.execute(f"SET TIME ZONE '{writer_zone}'")  # the application writes its local wall clock
        conn.execute("INSERT INTO public.naive_events SELECT gen_random_uuid(), 'api_request', "
                     "localtimestamp - interval '1 minute' - i * interval '1 second', '{}', localtimestamp "
                     "FROM generate_series(1, 300) i")
        source_now = conn.execute("SELECT now()").fetchone()[0]
    report = run(settings, engine=engine, spark=spark)
    assert report.rows_inserted == 300 and report.rows_in_future == 0
    [[newest, oldest]] = lake_query(settings, "SELECT max(event_timestamp), min(event_timestamp) "
                                        "FROM lake.main.naive_events")
    # the true instants: a minute (and up to 5 more) before the source's clock, not hours off
    assert timedelta(seconds=59) <= source_now - newest <= timedelta(minutes=2)
    assert source_now - oldest <= timedelta(minutes=7)
    with psycopg.connect(dsn.with_timezone(None).conninfo(), autocommit=True) as conn:
        conn.execute(f"SET TIME ZONE '{writer_zone}'")
        conn.execute("INSERT INTO public.naive_events SELECT gen_random_uuid(), 'api_request', "
                     "localtimestamp - i * interval '1 millisecond', '{}', localtimestamp "
                     "FROM generate_series(1, 40) i")
    assert run(settings, engine=engine, spark=spark).rows_inserted == 40
    status = collect(resolve(settings))
    assert status.source_rows_after_watermark == 0 and status.source_rows_in_future == 0
    assert status.lag_seconds is not None and status.lag_seconds < 120
    assert_lake_equals_source(settings, expected_rows=340)


def _noon_offset() -> int:
    """Hours west of UTC of a zone whose standard wall clock reads about noon now, so a daylight
    period of a few minutes or hours around now never straddles a local midnight or a year's end."""
    return datetime.now(UTC).hour - 12


def _posix_day(wall: datetime) -> int:
    """The zero-based day of the year of a POSIX rule's ``n`` form (counts February 29, unlike ``Jn``)."""
    return wall.timetuple().tm_yday - 1


def _dst_began(minutes_ago: int) -> str:
    """A POSIX-rule zone (daylight time an hour ahead) whose daylight time began ``minutes_ago``
    and lasts two hours, past the test."""
    return _dst_for(minutes_ago, minutes_ago - 120)


@pytest.mark.parametrize("engine", ["spark", "dlt", pytest.param("spark-jdbc", marks=NEEDS_JDBC_JAR)])
def test_naive_times_across_a_daylight_saving_change_load_as_they_read_whatever_the_plan(lake_env, spark, engine):
    """Issue 53's hidden attack: naive times written across a spring-forward change (values in the
    hour that does not exist), in a zone given by a POSIX rule. Read as instants they are out of the
    wall clock's order, so the time column's index and a sequential scan returned different rows for
    one range: with the index (seqscan off here), a load read 1 row of 61 loadable and proved it
    complete; --verify found 60 only in the source. Each row is now read as its instant, the index
    only bounding the scan."""
    jdbc = {"SPARK_READER": "jdbc", "SPARK_PARTITIONS": "3"} if engine == "spark-jdbc" else {}
    env = {**lake_env, "SOURCE_TABLE": "public.naive_events", **jdbc}
    settings = load_settings(env)
    dsn = resolve(settings).source_dsn
    with psycopg.connect(dsn.conninfo(), autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dsn.dbname}" SET timezone TO \'{_dst_began(5)}\'')
        conn.execute(f'ALTER DATABASE "{dsn.dbname}" SET enable_seqscan TO off')
    with psycopg.connect(dsn.with_timezone(None).conninfo(), autocommit=True) as conn:
        conn.execute("CREATE TABLE public.naive_events (event_id uuid PRIMARY KEY, event_type text, "
                     "event_timestamp timestamp, details jsonb, created_at timestamptz DEFAULT now())")
        conn.execute("CREATE INDEX ON public.naive_events (event_timestamp) INCLUDE (event_id)")
        # an hour of wall times back from now, 15 s apart: through the hour the change skipped
        conn.execute("INSERT INTO public.naive_events (event_id, event_type, event_timestamp, details) "
                     "SELECT gen_random_uuid(), 'api_request', localtimestamp - i * interval '15 second', '{}' "
                     "FROM generate_series(1, 240) i")
    first = run(settings, engine=engine.split("-")[0], spark=spark)
    assert first.rows_inserted > 0 and first.lacking == {}, first
    assert_lake_equals_source(settings)
    with psycopg.connect(dsn.with_timezone(None).conninfo(), autocommit=True) as conn:
        conn.execute("INSERT INTO public.naive_events (event_id, event_type, event_timestamp, details) "
                     "SELECT gen_random_uuid(), 'api_request', localtimestamp - i * interval '1 millisecond', "
                     "'{}' FROM generate_series(1, 40) i")
    second = run(settings, engine=engine.split("-")[0], spark=spark)
    assert second.rows_inserted == 40 and second.lacking == {}, second
    # (wall times in the skipped hour are instants ahead of the clock: read with their transaction)
    assert_lake_equals_source(settings)
    assert lake_query(settings, "SELECT count(*) FROM lake.main.naive_events") == [(first.rows_inserted + 40,)]


def _dst_for(began_minutes_ago: int, ended_minutes_ago: int) -> str:
    """A POSIX-rule zone (daylight time an hour ahead) whose daylight time lasted from
    ``began_minutes_ago`` to ``ended_minutes_ago`` (negative: from now): a period shorter than a
    day, on one local day whatever the hour the test runs (the zone's offset puts its wall clock
    near noon)."""
    offset = _noon_offset()
    now = datetime.now(UTC)
    start = now - timedelta(minutes=began_minutes_ago) - timedelta(hours=offset)  # standard wall time
    end = now - timedelta(minutes=ended_minutes_ago) - timedelta(hours=offset - 1)  # daylight wall time
    return (f"AAA{offset}BBB{offset - 1},{_posix_day(start)}/{start:%H:%M:%S},"
            f"{_posix_day(end)}/{end:%H:%M:%S}")


def test_a_daylight_period_of_minutes_in_a_posix_zone_loses_no_row(lake_env):
    """Found by the adversary: the index's wall-time bounds took the zone's offsets a day around
    each bound, every 12 hours; a daylight period of 45 minutes between two samples was never
    seen, and 45 of 120 rows were read by no load while every check but the whole-table --verify
    said the lake was complete. A POSIX rule can make a period any length: its ranges are tested
    row by row."""
    env = {**lake_env, "SOURCE_TABLE": "public.naive_events"}
    settings = load_settings(env)
    dsn = resolve(settings).source_dsn
    with psycopg.connect(dsn.conninfo(), autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dsn.dbname}" SET timezone TO \'{_dst_for(50, 5)}\'')
    with psycopg.connect(dsn.with_timezone(None).conninfo(), autocommit=True) as conn:
        conn.execute("CREATE TABLE public.naive_events (event_id uuid PRIMARY KEY, event_type text, "
                     "event_timestamp timestamp, details jsonb, created_at timestamptz DEFAULT now())")
        conn.execute("CREATE INDEX ON public.naive_events (event_timestamp) INCLUDE (event_id)")
        conn.execute("INSERT INTO public.naive_events (event_id, event_type, event_timestamp, details) "
                     "SELECT gen_random_uuid(), 'api_request', (now() - i * interval '1 minute') AT TIME ZONE "
                     "current_setting('TimeZone'), '{}' FROM generate_series(1, 120) i")
    report = run(settings, engine="dlt")
    assert report.rows_inserted == 120 and report.lacking == {}, report
    assert_lake_equals_source(settings, expected_rows=120)
