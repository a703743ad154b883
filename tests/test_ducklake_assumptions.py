"""Pins how DuckLake behaves in the ways this pipeline relies on, so that a version bump
that changes any of it fails here, loudly, before it corrupts a lake."""

from __future__ import annotations

import duckdb
import pytest

from pipeline.lake import connect as lake
from pipeline.lake import schema
from pipeline.settings.resolve import resolve


@pytest.fixture
def con(settings):
    resolved = resolve(settings)
    connection = lake.connect(resolved)
    schema.ensure_tables(connection, resolved)
    yield connection
    connection.close()


def _latest(con) -> int:
    return con.execute("SELECT max(snapshot_id) FROM lake.snapshots()").fetchone()[0]


def test_one_transaction_with_two_tables_makes_exactly_one_snapshot(con):
    before = _latest(con)
    con.execute("BEGIN")
    con.execute("CALL lake.set_commit_message('tests', 'two tables', extra_info => '{\"k\": 1}')")
    con.execute("INSERT INTO lake.main.events SELECT uuid(), 't', now(), '{}', now() FROM range(20)")
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
    con.execute("INSERT INTO lake.main.events SELECT uuid(), 't', now(), '{}', now() FROM range(20)")
    con.execute("ROLLBACK")
    assert _latest(con) == before
    assert con.execute("SELECT count(*) FROM lake.main.events").fetchone()[0] == 0


def test_time_travel_reads_an_old_version(con):
    con.execute("INSERT INTO lake.main.events SELECT uuid(), 't', now(), '{}', now() FROM range(5)")
    version = _latest(con)
    con.execute("INSERT INTO lake.main.events SELECT uuid(), 't', now(), '{}', now() FROM range(7)")
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
    con.execute("INSERT INTO lake.main.events SELECT uuid(), 't', TIMESTAMPTZ '2026-01-01 12:00:00+00' "
                "+ INTERVAL (i % 3) DAY, '{}', now() FROM range(30) t(i)")
    files = [r[0] for r in con.execute(
        "SELECT data_file FROM ducklake_list_files('lake', 'events')").fetchall()]
    days = sorted({part for f in files for part in f.split("/") if part.startswith("day=")})
    assert days == ["day=1", "day=2", "day=3"], files
