"""Pins how DuckLake behaves in the ways this pipeline relies on, so that a version bump
that changes any of it fails here, loudly, before it corrupts a lake."""

from __future__ import annotations

import duckdb
import pytest

from pipeline.lake import connect as lake
from pipeline.lake import schema
from pipeline.lake.session import Lake
from pipeline.settings.resolve import resolve


@pytest.fixture
def con(lake_env):
    """A lake whose events table holds ids and JSON as text (as one made by the JDBC reader in
    zero-copy mode), so Spark-like files register into it."""
    from pipeline.settings import load_settings

    resolved = resolve(load_settings({**lake_env, "SPARK_READER": "jdbc"}))
    connection = lake.connect(resolved)
    schema.ensure_tables(Lake.of(connection, resolved).table_named("events"),
                         schema.column_types(resolved.promotion, resolved.spark.reader))
    yield connection
    connection.close()


# the events table's own columns, named: it has a column more (each row's first snapshot, pipeline/lake/known_since.py)
EVENTS = "lake.main.events (event_id, event_type, event_timestamp, details, created_at)"


def _latest(con) -> int:
    return con.execute("SELECT max(snapshot_id) FROM lake.snapshots()").fetchone()[0]


def test_one_transaction_with_two_tables_makes_exactly_one_snapshot(con):
    before = _latest(con)
    con.execute("BEGIN")
    con.execute("CALL lake.set_commit_message('tests', 'two tables', extra_info => '{\"k\": 1}')")
    con.execute(f"INSERT INTO {EVENTS} SELECT uuid(), 't', now(), '{{}}', now() FROM range(20)")
    con.execute("INSERT INTO lake.ops.batches (batch_id) VALUES ('b1')")
    con.execute("COMMIT")
    after = _latest(con)
    assert after == before + 1
    message, extra = con.execute(
        "SELECT commit_message, commit_extra_info FROM lake.snapshots() WHERE snapshot_id = ?",
        [after]).fetchone()
    assert message == "two tables" and '"k": 1' in extra


def test_rollback_leaves_no_snapshot_and_no_rows(con):
    before = _latest(con)
    con.execute("BEGIN")
    con.execute(f"INSERT INTO {EVENTS} SELECT uuid(), 't', now(), '{{}}', now() FROM range(20)")
    con.execute("ROLLBACK")
    assert _latest(con) == before
    assert con.execute("SELECT count(*) FROM lake.main.events").fetchone()[0] == 0


def test_time_travel_reads_an_old_version(con):
    con.execute(f"INSERT INTO {EVENTS} SELECT uuid(), 't', now(), '{{}}', now() FROM range(5)")
    version = _latest(con)
    con.execute(f"INSERT INTO {EVENTS} SELECT uuid(), 't', now(), '{{}}', now() FROM range(7)")
    assert con.execute(f"SELECT count(*) FROM lake.main.events AT (VERSION => {version})").fetchone()[0] == 5
    assert con.execute("SELECT count(*) FROM lake.main.events").fetchone()[0] == 12


def test_writing_two_attached_databases_in_one_transaction_is_refused(con):
    """Why promotion stages nothing in temp tables inside its transaction."""
    con.execute("CREATE TABLE memory.main.scratch (i INT)")
    con.execute("BEGIN")
    con.execute("INSERT INTO lake.ops.batches (batch_id) VALUES ('x')")
    with pytest.raises(duckdb.Error):
        con.execute("INSERT INTO memory.main.scratch VALUES (1)")
    con.execute("ROLLBACK")


def test_events_table_is_partitioned_by_event_day(con):
    con.execute(f"INSERT INTO {EVENTS} SELECT uuid(), 't', TIMESTAMPTZ '2026-01-01 12:00:00+00' "
                "+ INTERVAL (i % 3) DAY, '{}', now() FROM range(30) t(i)")
    files = [r[0] for r in con.execute(
        "SELECT data_file FROM ducklake_list_files('lake', 'events')").fetchall()]
    days = sorted({part for f in files for part in f.split("/") if part.startswith("day=")})
    assert days == ["day=1", "day=2", "day=3"], files


# Zero-copy promotion (pipeline/promote/zero_copy.py) relies on what follows.

def _spark_like_file(path, day: int, rows: int = 3, *, typed: bool = False) -> str:
    """A Parquet file as Spark writes one: ids and JSON as plain strings, UTC microsecond instants;
    ``typed``: as the arrow reader writes one, with Parquet's UUID and JSON logical types."""
    import uuid
    from datetime import UTC, datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    ts = pa.array([datetime(2026, 11, day, 5, tzinfo=UTC)] * rows, pa.timestamp("us", tz="UTC"))
    ids: pa.Array = pa.array([str(uuid.uuid4()) for _ in range(rows)])
    details: pa.Array = pa.array(['{"a": 1}'] * rows)
    if typed:
        ids = pa.ExtensionArray.from_storage(pa.uuid(), pa.array([uuid.uuid4().bytes for _ in range(rows)],
                                                                 pa.binary(16)))
        details = pa.ExtensionArray.from_storage(pa.json_(), details)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"event_id": ids, "event_type": ["t"] * rows, "event_timestamp": ts,
                             "details": details, "created_at": ts}), path)
    return str(path)


def _day_folder(settings, day: int):
    from pathlib import Path

    return Path(resolve(settings).data_path) / "main" / "events" / f"year=2026/month=11/day={day}"


def test_registering_a_file_needs_equal_column_types(con, lake_env):
    """Why the arrow reader writes Parquet's UUID/JSON types, and why a lake made by the JDBC
    reader holds event_id and details as VARCHAR: a UUID/JSON table refuses Spark's strings
    and takes pyarrow's UUID/JSON file; a VARCHAR one takes the strings."""
    from pipeline.settings import load_settings

    settings = load_settings(lake_env)
    con.execute("CREATE TABLE lake.main.typed (event_id UUID, event_type VARCHAR, "
                "event_timestamp TIMESTAMPTZ, details JSON, created_at TIMESTAMPTZ)")
    other = _day_folder(settings, 21).parent.parent.parent / "other"
    path = _spark_like_file(other / "f.parquet", 21)
    with pytest.raises(duckdb.Error, match='Failed to map column "event_id"'):
        con.execute("CALL ducklake_add_data_files('lake', 'typed', ?)", [path])
    con.execute("CALL ducklake_add_data_files('lake', 'typed', ?)", [_spark_like_file(other / "t.parquet", 21,
                                                                                      typed=True)])
    assert con.execute("SELECT count(*), count(DISTINCT event_id), min(details->>'$.a') FROM lake.main.typed"
                       ).fetchone() == (3, 3, "1")
    assert con.execute("SELECT data_type FROM duckdb_columns() WHERE database_name = 'lake' "
                       "AND schema_name = 'main' AND table_name = 'events' AND column_name IN ('event_id', 'details')").fetchall() == \
        [("VARCHAR",), ("VARCHAR",)]


def test_files_registered_with_insert_and_message_make_one_snapshot_then_compact_like_own_files(con, settings):
    before = _latest(con)
    paths = [_spark_like_file(_day_folder(settings, 21) / f"b{i}-00000.parquet", 21) for i in range(2)]
    con.execute("BEGIN")
    con.execute("CALL lake.set_commit_message('tests', 'register')")
    con.execute(f"INSERT INTO {EVENTS} SELECT uuid(), 't', TIMESTAMPTZ '2026-11-21 06:00:00+00', "
                "'{}', now()")
    con.execute("CALL ducklake_add_data_files('lake', 'events', ?, hive_partitioning => true, allow_missing => true)", [paths])
    con.execute("COMMIT")
    assert _latest(con) == before + 1
    # the partition value comes from the folder name: a day filter finds the rows
    assert con.execute("SELECT count(*) FROM lake.main.events WHERE event_timestamp::DATE = DATE "
                       "'2026-11-21'").fetchone()[0] == 7
    con.execute("CALL ducklake_flush_inlined_data('lake')")
    con.execute("CALL ducklake_merge_adjacent_files('lake')")  # same folder as DuckLake's own: merged
    assert con.execute("SELECT count(*) FROM ducklake_list_files('lake', 'events')").fetchone()[0] == 1
    con.execute("CALL ducklake_expire_snapshots('lake', older_than => now() + INTERVAL 1 SECOND)")
    deleted = [r[0] for r in con.execute("CALL ducklake_cleanup_old_files('lake', cleanup_all => true)").fetchall()]
    assert set(paths) <= set(deleted)  # registered files are the lake's to delete
    assert con.execute("SELECT count(*) FROM lake.main.events").fetchone()[0] == 7


def test_files_of_one_day_in_other_folders_break_compaction_and_unregistered_files_are_orphans(con, settings):
    """Why zero-copy moves Spark's output into DuckLake's own day folders before registering it."""
    table = _day_folder(settings, 22).parent.parent.parent
    paths = [_spark_like_file(table / "_incoming" / b / "year=2026/month=11/day=22/p-00000.parquet", 22)
             for b in ("b1", "b2")]
    assert set(paths) <= {r[0] for r in con.execute(
        "CALL ducklake_delete_orphaned_files('lake', dry_run => true, cleanup_all => true)").fetchall()}
    con.execute("CALL ducklake_add_data_files('lake', 'events', ?, hive_partitioning => true, allow_missing => true)", [paths])
    with pytest.raises(duckdb.Error, match="different hive partition path"):
        con.execute("CALL ducklake_merge_adjacent_files('lake')")


def test_a_catalog_query_error_keeps_its_reason_on_the_line_people_see():
    """DuckDB's Postgres catalog says ``Failed to execute query "<SQL over many lines>": <reason>``;
    the one line an error shows was cut inside the SQL, hiding the reason (seen: "server closed
    the connection unexpectedly" lost from a catalog outage's message)."""
    from pipeline.errors import first_line
    from pipeline.lake.extensions import new_instance

    con = new_instance("postgres")
    con.execute("ATTACH 'host=127.0.0.1 user=postgres dbname=postgres' AS pg (TYPE postgres)")
    with pytest.raises(duckdb.Error) as failed:
        con.execute("CALL postgres_execute('pg', 'SELECT 1\n  FROM pg_class\n  WHERE 1/0 = 1')")
    assert 'Failed to execute query "' in str(failed.value) and "\n" in str(failed.value)
    assert first_line(failed.value) == "Failed to execute query (…): ERROR:  division by zero"
