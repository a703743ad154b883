"""The application's DDL while a load reads (issue 72): the statement goes through within seconds,
the application's writes never wait on the load, and the load still finishes exact.

The planner's transaction holds ACCESS SHARE on the tables it read until its part is staged. An
ALTER TABLE queues behind it, and every later lock request behind the ALTER: the application's
INSERTs, and the part's readers not yet started, which the load waits for. Postgres sees no cycle;
nothing moved until a timeout (:mod:`pipeline.source.give_way`)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from pipeline.extract import spark_arrow
from pipeline.settings.resolve import resolve
from pipeline.source.connect import connect
from pipeline.source.ddl import ensure_table
from tests import faults
from tests.conftest import load_settings
from tests.helpers import assert_lake_equals_source, lake_query, run, source_table

ROWS = 2000
PATIENCE = 60  # seconds a test waits for what must happen far sooner (a busy machine)


def _statement_waits(conn: psycopg.Connection, pid: int) -> bool:
    return conn.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                        (pid,)).fetchone() == (True,)


class Migration:
    """An application's migration, issued once the load's readers are reading: an ALTER TABLE with no
    lock_timeout (Postgres's default), then, while the ALTER waits, one of the application's INSERTs
    with a statement_timeout of 3 s. Records how long the ALTER took and what the INSERT met."""

    def __init__(self, dsn: str, table: str, alter: str) -> None:
        self.dsn, self.table, self.alter = dsn, table, alter
        self.alter_seconds: float | None = None
        self.alter_error: str | None = None
        self.insert_error: str | None = "not issued"
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._migrate, name="migration", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join(PATIENCE * 3)

    def _migrate(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as watch:
                deadline = time.monotonic() + PATIENCE
                # the load's readers, tagged event-lake <snapshot> <batch>, in their (slowed) read
                while watch.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE "
                                    "'event-lake%' AND wait_event = 'PgSleep'").fetchone() == (0,):
                    if time.monotonic() > deadline:
                        self.alter_error = "no reader of the load was seen reading"
                        return
                    time.sleep(0.05)
                altering = threading.Thread(target=self._alter)
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    self._alter_conn = conn
                    started = time.monotonic()
                    altering.start()
                    while self.alter_seconds is None and self.alter_error is None and not _statement_waits(
                            watch, conn.info.backend_pid) and time.monotonic() - started < PATIENCE:
                        time.sleep(0.02)
                    self._insert()
                    altering.join(PATIENCE * 2)
        finally:
            self.done.set()

    def _alter(self) -> None:
        started = time.monotonic()
        try:
            self._alter_conn.execute("SET statement_timeout = '120s'")  # a bound for the test only
            self._alter_conn.execute(self.alter)
            self.alter_seconds = time.monotonic() - started
        except psycopg.Error as exc:
            self.alter_error = str(exc)

    def _insert(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as app:
                app.execute("SET statement_timeout = '3s'")
                app.execute(f"INSERT INTO {self.table} (event_id, event_type, event_timestamp) "
                            "VALUES (gen_random_uuid(), 'view', now() - interval '2 hours')")
            self.insert_error = None
        except psycopg.Error as exc:
            self.insert_error = str(exc)


@pytest.mark.parametrize("alter", ["ADD COLUMN extra int", "ALTER COLUMN event_type TYPE varchar(80)"])
def test_an_alter_table_while_a_part_is_read_goes_through_and_the_load_reads_again(
        lake_env, spark, monkeypatch, alter):
    """Mid-part: the load's readers are reading (each slice's query sleeps first), so readers of the
    part not started yet would queue behind the ALTER. The ALTER completes within 10 s, the
    application's INSERT meanwhile within its 3 s, and the load ends exact: the part it gave way with
    is read again after the ALTER (a type change rewrites the table: read in the old snapshot after
    it, the table is empty)."""
    settings = resolve(load_settings({**lake_env, "SPARK_PARTITIONS": "4"}))
    table = source_table(settings)
    with connect(settings.source_dsn) as conn:
        ensure_table(conn, table)
        conn.execute(f"INSERT INTO {table} (event_id, event_type, event_timestamp) SELECT gen_random_uuid(), "
                     f"'view', now() - interval '1 hour' - make_interval(secs => i) FROM generate_series(1, {ROWS}) i")
    migration = Migration(settings.source_dsn.conninfo(), table, f"ALTER TABLE {table} {alter}")
    real_select = spark_arrow.select_sql
    monkeypatch.setenv(faults.SLOW_ENV, "20")

    def slow_until_migrated(*args, **kwargs):  # the read the ALTER comes during: 20 s a slice
        query = real_select(*args, **kwargs)
        return query if migration.done.is_set() else faults.slow_query(query)

    monkeypatch.setattr(spark_arrow, "select_sql", slow_until_migrated)
    migration.start()
    report = run(settings, spark=spark)
    migration.join()
    assert migration.alter_error is None, migration.alter_error
    assert migration.alter_seconds is not None and migration.alter_seconds < 10, migration.alter_seconds
    assert migration.insert_error is None, migration.insert_error  # not: statement timeout
    # the part read again after the ALTER: the application's row too, when its time was in the window
    assert report.rows_inserted in (ROWS, ROWS + 1), report.summary()
    run(settings, spark=spark)
    assert_lake_equals_source(settings, expected_rows=ROWS + 1)
    with connect(settings.source_dsn) as conn:  # nothing of the load left open in the source
        assert conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                            "AND (application_name LIKE 'event-lake %' OR state LIKE 'idle in transaction%')"
                            ).fetchone() == (0,)
    if alter.startswith("ADD"):
        assert lake_query(settings, "SELECT count(*) FROM lake.main.events WHERE extra IS NULL") == [(ROWS + 1,)]
