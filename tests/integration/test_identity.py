"""Exact by identity: which ids a range holds decides, never how many (real Postgres, Spark and
DuckLake). A source that deletes, moves or fixes rows must not hide a missing row or double an
id, and ``--status`` is not healthy while the lake differs from the source."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from pipeline.ops.metrics import families
from pipeline.ops.observe import Observer
from pipeline.ops.pipeline import Pipeline
from pipeline.ops.status import collect
from pipeline.settings.resolve import resolve
from tests.conftest import BOTH_MODES, load_settings
from tests.helpers import (
    add_events,
    assert_lake_equals_source,
    events_table,
    lake_query,
    run,
    source_db,
    source_table,
)


def _lake_ids(settings) -> tuple[int, int]:
    table = events_table(settings)
    [(rows, ids)] = lake_query(settings, f"SELECT count(*), count(DISTINCT event_id) FROM {table}")
    return rows, ids


def _loaded_and_fast(settings, spark) -> None:
    """Two loads: the second records an arrival mark, so the next one reads only new arrivals."""
    add_events(settings, 200, seed=401)
    run(settings, spark=spark)
    add_events(settings, 10, seed=402)
    run(settings, spark=spark)


def _backfill(conn: psycopg.Connection, table: str) -> uuid.UUID:
    """A row dated in the look-back that arrives with yesterday's created_at (a backfill, a replay)."""
    row_id = uuid.uuid4()
    conn.execute(f"INSERT INTO {table} VALUES (%s, 'backfill', now() - interval '2 minutes', '{{}}', "
                 "now() - interval '1 day')", (row_id,))
    return row_id


def _one_loaded_id(conn: psycopg.Connection, table: str) -> uuid.UUID:
    return conn.execute(f"SELECT event_id FROM {table} WHERE event_timestamp > now() - interval '10 minutes' "
                        "ORDER BY event_id LIMIT 1").fetchone()[0]


def test_a_row_deleted_beside_a_backfill_hides_neither(settings, lake_env, spark, cli):
    """Equal counts (one row gone, one come): the backfill is loaded by the next run, and --status
    names the row the source deleted instead of saying healthy; --verify --since proves the range
    bucket by bucket and names the first that differs."""
    _loaded_and_fast(settings, spark)
    proven = cli("--verify", "--since", "all", env=lake_env)
    assert proven.returncode == 0 and "lake == source by id and content in" in proven.stdout + proven.stderr
    table = source_table(settings)
    with source_db(settings) as conn:
        gone = _one_loaded_id(conn, table)
        conn.execute(f"DELETE FROM {table} WHERE event_id = %s", (gone,))
        came = _backfill(conn, table)
    report = run(settings, spark=spark)
    assert report.rows_inserted == 1
    assert lake_query(settings, f"SELECT count(*) FROM {events_table(settings)} "
                                f"WHERE event_id = '{came}'") == [(1,)]
    assert (check := report.tables["events"].check) is not None and check.extra == [gone]
    status = collect(resolve(settings))
    assert status.health.state == "failing"
    assert status.lake_rows_not_in_source == 1
    assert status.identity is not None and status.identity.extra == [gone]
    assert any("no longer has" in reason for reason in status.health.reasons)
    gauges = {m.name: m.samples[0].value for m in families(Observer(resolve(settings)).observe()) if m.samples}
    assert gauges["event_lake_rows_diverged"] == 1 and "event_lake_proven_seconds" not in gauges
    differs = cli("--verify", "--since", "2h", env=lake_env)
    said = differs.stdout + differs.stderr
    assert differs.returncode == 1, said
    assert "1 lake row(s) the source does not hold there" in said and str(gone) in said
    assert "the first 1-minute bucket that differs starts" in said
    text = cli("--status", env=lake_env)
    assert "by identity" in text.stdout and str(gone) in text.stdout
    # the one command that makes lake == source again: its own snapshot, the old state kept
    before = lake_query(settings, "SELECT max(snapshot_id) FROM lake.snapshots()")[0][0]
    repaired = cli("--repair", "--since", "2h", env=lake_env)
    assert repaired.returncode == 0, repaired.stderr
    assert "removed 1 lake row(s), loaded 0" in repaired.stdout + repaired.stderr
    assert_lake_equals_source(settings)
    assert collect(resolve(settings)).health.state == "healthy"
    gauges = {m.name: m.samples[0].value for m in families(Observer(resolve(settings)).observe()) if m.samples}
    assert gauges["event_lake_rows_diverged"] == 0 and gauges["event_lake_proven_seconds"] >= 0
    [(message,)] = lake_query(settings, "SELECT commit_message FROM lake.snapshots() WHERE snapshot_id = "
                                        f"{before + 1}")
    assert message.startswith("events repair ")
    assert lake_query(settings, f"SELECT count(*) FROM lake.main.events AT (VERSION => {before}) "
                                f"WHERE event_id = '{gone}'") == [(1,)]


def test_a_row_moved_out_of_the_look_back_beside_a_backfill_hides_neither(settings, spark):
    _loaded_and_fast(settings, spark)
    table = source_table(settings)
    with source_db(settings) as conn:
        moved = _one_loaded_id(conn, table)
        conn.execute(f"UPDATE {table} SET event_timestamp = now() - interval '2 days' WHERE event_id = %s",
                     (moved,))
        _backfill(conn, table)
    assert run(settings, spark=spark).rows_inserted == 1
    assert _lake_ids(settings) == (211, 211)  # 210 loaded + the backfill; the moved row once
    assert collect(resolve(settings)).health.state == "failing"


@BOTH_MODES
def test_a_loaded_row_moved_into_the_look_back_is_not_loaded_again(settings, spark):
    """The anti-join covers the whole lake: an id the lake holds, wherever it is dated, is never
    inserted twice (was 332 lake rows for 331 ids, 'HEALTHY')."""
    from datetime import timedelta

    add_events(settings, 100, seed=403, late_by=timedelta(days=2))
    add_events(settings, 20, seed=404)
    run(settings, spark=spark)
    table = source_table(settings)
    with source_db(settings) as conn:
        [[moved]] = conn.execute(f"SELECT event_id FROM {table} WHERE event_timestamp < now() - interval '1 day' "
                                 "LIMIT 1").fetchall()
        conn.execute(f"UPDATE {table} SET event_timestamp = now() - interval '1 minute' WHERE event_id = %s",
                     (moved,))
    add_events(settings, 5, seed=405)
    report = run(settings, spark=spark)
    assert report.rows_inserted == 5
    assert _lake_ids(settings) == (125, 125)
    assert (check := report.tables["events"].check) is not None and check.moved == [moved]
    status = collect(resolve(settings))
    assert status.health.state == "failing" and status.identity is not None
    assert status.identity.moved == [moved]
    with Pipeline(settings) as pipeline:
        repaired = pipeline.repair(None)
    assert (repaired.rows_removed, repaired.rows_loaded) == (1, 1)
    assert_lake_equals_source(settings, expected_rows=125)  # the row as the source dates it now
    assert collect(resolve(settings)).health.state == "healthy"


LOOSE_TABLE = """
CREATE TABLE public.loose_events (event_id text PRIMARY KEY, event_type text, event_timestamp timestamptz,
                                  details text, created_at timestamptz DEFAULT now())
"""


def test_a_quarantined_row_fixed_in_the_source_is_loaded(lake_env, spark):
    """A row set aside for its details counts as held only while the source keeps it as it was:
    fixed, it is read again and loaded, and the quarantine keeps the history."""
    settings = load_settings({**lake_env, "SOURCE_TABLE": "public.loose_events"})
    bad = str(uuid.uuid4()).upper()  # a text id in another spelling than the lake's
    with source_db(settings) as conn:
        conn.execute(LOOSE_TABLE)
        conn.execute("INSERT INTO public.loose_events (event_id, event_type, event_timestamp, details) "
                     "SELECT gen_random_uuid()::text, 'click', now() - interval '1 minute', '{}' "
                     "FROM generate_series(1, 30)")
        conn.execute("INSERT INTO public.loose_events (event_id, event_type, event_timestamp, details) "
                     "VALUES (%s, 'click', now() - interval '1 minute', '{broken')", (bad,))
    first = run(settings, spark=spark)
    assert (first.rows_inserted, first.rows_quarantined) == (30, 1)
    assert (check := first.tables["loose_events"].check) is not None and check.exact  # a row set aside is held while unchanged
    again = run(settings, spark=spark)
    assert (again.rows_inserted, again.rows_quarantined) == (0, 0)
    assert collect(resolve(settings)).health.state == "healthy"
    with source_db(settings) as conn:  # the application repairs it, in place (created_at unchanged)
        conn.execute("UPDATE public.loose_events SET details = '{\"fixed\": true}' WHERE event_id = %s", (bad,))
    fixed = run(settings, spark=spark)
    assert fixed.rows_inserted == 1
    assert lake_query(settings, "SELECT details->>'fixed' FROM lake.main.loose_events WHERE event_id = ?",
                      [bad.lower()]) == [("true",)]
    assert lake_query(settings, "SELECT count(*) FROM lake.ops.quarantine") == [(1,)]  # the history stays
    assert _lake_ids(settings) == (31, 31)
    assert collect(resolve(settings)).health.state == "healthy"


@pytest.mark.parametrize("writer", ["now() - interval '1 day'", "timestamptz '2019-06-01 12:00:00+00'"])
def test_a_backfill_alone_is_loaded_by_the_next_run(settings, spark, writer):
    _loaded_and_fast(settings, spark)
    table = source_table(settings)
    with source_db(settings) as conn:
        conn.execute(f"INSERT INTO {table} VALUES (gen_random_uuid(), 'x', now() - interval '3 minutes', "
                     f"'{{}}', {writer})")
    report = run(settings, spark=spark)
    assert report.rows_inserted == 1 and (check := report.tables["events"].check) is not None and check.exact


def _swapped(row_id: uuid.UUID) -> uuid.UUID:
    return uuid.UUID(bytes=row_id.bytes[8:] + row_id.bytes[:8])


@pytest.mark.parametrize("replacement", ["halves swapped", "nil for max"])
def test_ids_a_one_value_checksum_confused_are_told_apart(settings, spark, replacement):
    """Summing one 64-bit value per id (the XOR of its halves) let a row be replaced, unseen, by
    the same id with its halves swapped, or the nil UUID by the max: run, status, --verify --since
    and --repair all said the lake was exact. The halves are summed apart."""
    _loaded_and_fast(settings, spark)
    table = source_table(settings)
    with source_db(settings) as conn:
        if replacement == "nil for max":
            conn.execute(f"INSERT INTO {table} VALUES ('00000000-0000-0000-0000-000000000000', 'nil', "
                         "now() - interval '2 minutes', '{}', now())")
            run(settings, spark=spark)
            gone, came = uuid.UUID(int=0), uuid.UUID(int=2 ** 128 - 1)
        else:
            gone = _one_loaded_id(conn, table)
            came = _swapped(gone)
        dated = conn.execute(f"SELECT event_timestamp FROM {table} WHERE event_id = %s", (gone,)).fetchone()[0]
        conn.execute(f"DELETE FROM {table} WHERE event_id = %s", (gone,))
        conn.execute(f"INSERT INTO {table} VALUES (%s, 'backfill', %s, '{{}}', now() - interval '1 day')",
                     (came, dated))
    report = run(settings, spark=spark)
    assert report.rows_inserted == 1 and (check := report.tables["events"].check) is not None and check.extra == [gone]
    status = collect(resolve(settings))
    assert status.health.state == "failing" and status.identity is not None and status.identity.extra == [gone]


def test_one_id_spelled_twice_in_a_text_key_is_one_id(lake_env, spark):
    """A text primary key holding one UUID in two spellings: the lake holds it once, and the check
    agrees (it summed both spellings: healthy, yet 'checksums differ' in --verify --since)."""
    settings = load_settings({**lake_env, "SOURCE_TABLE": "public.loose_events"})
    with source_db(settings) as conn:
        conn.execute(LOOSE_TABLE)
        conn.execute("INSERT INTO public.loose_events (event_id, event_type, event_timestamp, details) "
                     "SELECT gen_random_uuid()::text, 'click', now() - interval '1 minute', '{}' "
                     "FROM generate_series(1, 20)")
        conn.execute("INSERT INTO public.loose_events (event_id, event_type, event_timestamp, details) VALUES "
                     "('d00d0000-0000-4000-8000-000000000001', 'a', now() - interval '1 minute', '{}'), "
                     "('D00D0000-0000-4000-8000-000000000001', 'a', now() - interval '1 minute', '{}'), "
                     # one brace only: not a UUID to either side (was: every run crashed on the cast)
                     "('{c0ffee00-0000-4000-8000-000000000008', 'b', now() - interval '1 minute', '{}')")
    report = run(settings, spark=spark)
    assert report.rows_inserted == 21 and (check := report.tables["loose_events"].check) is not None and check.exact
    assert lake_query(settings, "SELECT count(*) FROM lake.ops.quarantine WHERE reason = 'event_id is not a UUID'") \
        == [(1,)]
    assert collect(resolve(settings)).health.state == "healthy"
    with Pipeline(settings) as pipeline:
        assert pipeline.prove(None).exact


# spellings of one id each, as an application may write them into a text key: (text, a UUID to Postgres)
SPELLINGS = [
    ("a0000000-0000-4000-8000-000000000001", True),
    ("A0000000-0000-4000-8000-000000000002", True),
    ("{a0000000-0000-4000-8000-000000000003}", True),
    ("a00000000000400080000000000000004", False),  # 33 digits
    ("a0000000000040008000000000000005", True),
    ("a000-0000-0000-4000-8000-0000-0000-0006", True),  # a hyphen after any group of four
    ("\ta0000000-0000-4000-8000-000000000007\n", True),  # led by a tab: stopped every load
    ("  a0000000-0000-4000-8000-000000000008  ", True),
    ("a0000000--0000-4000-8000-000000000009", False),  # a double hyphen: DuckDB's cast took it
    ("a-0-0-00000-0000-4000-8000-00000000000a", False),  # hyphens anywhere: DuckDB's cast took it
    ("\u00a0a0000000-0000-4000-8000-00000000000b", False),  # a leading no-break space
    ("a0000000-0000-4000-8000-00000000000c}", False),
]


def test_postgres_and_duckdb_read_every_spelling_of_a_text_id_alike(pg_server):
    """The one rule, on both engines: the same UUID or none for each spelling (DuckDB's own cast
    takes a hyphen anywhere; Postgres's trim() left a tab its uuid cast refused)."""
    import duckdb

    from pipeline.id_checksum import duckdb_id, postgres_id

    more = ["", "x", "0190b8e27-c4a-7000-8000-000000000001", "{190b8e2-7c4a-7000-8000-00000000000}",
            "0190b8e2-7c4a-7000-8000-00000000000-", "0190b8e2-7c4a-7000-8000-0000000000\u00e91"]
    spellings = [text for text, _ in SPELLINGS] + more
    duck = duckdb.connect()
    with psycopg.connect(pg_server.conninfo()) as pg:
        for text in spellings:
            [(in_duckdb,)] = duck.execute(f"SELECT {duckdb_id('t')} FROM (SELECT ? AS t)", [text]).fetchall()
            [(in_postgres,)] = pg.execute(f"SELECT {postgres_id('t', False)} FROM (SELECT %s::text AS t) s",
                                          [text]).fetchall()
            assert in_duckdb == in_postgres, repr(text)
            assert (in_duckdb is not None) == dict(SPELLINGS).get(text, False), repr(text)


def test_every_spelling_of_an_id_is_read_alike_by_both_sides_and_repair_never_removes_one(lake_env, spark):
    """An id Postgres does not read as a UUID that DuckDB did (a double hyphen, hyphens anywhere)
    was loaded, then called deleted by --status (the source side had no id for it), and the
    advised --repair removed it: source 2, lake 0, HEALTHY. An id led by a tab stopped every
    load ("invalid input syntax for type uuid"). One rule now reads a text id on both sides:
    the UUIDs load, the rest are quarantined, status is healthy, and repair removes nothing."""
    settings = load_settings({**lake_env, "SOURCE_TABLE": "public.loose_events"})
    with source_db(settings) as conn:
        conn.execute(LOOSE_TABLE)
        for text, _ in SPELLINGS:
            conn.execute("INSERT INTO public.loose_events (event_id, event_type, event_timestamp, details) "
                         "VALUES (%s, 'odd', now() - interval '1 minute', '{}')", (text,))
        conn.execute("INSERT INTO public.loose_events (event_id, event_type, event_timestamp, details) "
                     "SELECT gen_random_uuid()::text, 'click', now() - interval '1 minute', '{}' "
                     "FROM generate_series(1, 20)")
    uuids = [uuid.UUID(text.strip().strip("{}")) for text, valid in SPELLINGS if valid]
    report = run(settings, spark=spark)
    invalid = sum(not valid for _, valid in SPELLINGS)
    assert (report.rows_inserted, report.rows_quarantined) == (20 + len(uuids), invalid)
    assert (check := report.tables["loose_events"].check) is not None and check.exact
    loaded = {row[0] for row in lake_query(settings, "SELECT event_id FROM lake.main.loose_events "
                                                     "WHERE event_type = 'odd'")}
    assert loaded == set(uuids)
    assert collect(resolve(settings)).health.state == "healthy"
    with Pipeline(settings) as pipeline:
        repaired = pipeline.repair(None)
    assert (repaired.rows_removed, repaired.rows_loaded) == (0, 0)
    assert _lake_ids(settings) == (20 + len(uuids), 20 + len(uuids))
    assert_lake_equals_source(settings, expected_rows=20 + len(uuids))
    again = run(settings, spark=spark)  # and the next load goes on
    assert (again.rows_inserted, again.rows_quarantined) == (0, 0)


def test_status_tells_a_late_arrival_from_a_row_the_lake_lost(settings, lake_env, spark, cli):
    """Ids missing from the look-back are late arrivals when written after the last load's snapshot
    (healthy, said), and a loss when that snapshot held them (failing, named)."""
    _loaded_and_fast(settings, spark)
    table = source_table(settings)
    with source_db(settings) as conn:
        late = _backfill(conn, table)
    status = collect(resolve(settings))
    assert status.identity is not None and status.identity.missing == [late] and not status.identity.missed
    assert status.health.state == "healthy"
    assert "wait for the next" in cli("--status", env=lake_env).stdout
    run(settings, spark=spark)
    with source_db(settings) as conn:
        lost = _one_loaded_id(conn, table)
    assert cli("--write", "--sql", f"DELETE FROM events WHERE event_id = '{lost}'", env=lake_env).returncode == 0
    status = collect(resolve(settings))
    assert status.identity is not None and status.identity.missed == [lost]
    assert status.health.state == "failing" and any(str(lost) in r for r in status.health.reasons)


def test_an_id_a_keyless_source_repeats_in_two_minutes_is_not_called_moved(lake_env, spark):
    """A source without a key holding one id at two times: the lake holds it once, as loads
    promise; the bucket-by-bucket proof did not say 'moved', and --repair did not rewrite it every time."""
    settings = load_settings({**lake_env, "SOURCE_TABLE": "public.keyless"})
    with source_db(settings) as conn:
        conn.execute("CREATE TABLE public.keyless (event_id text, event_type text, event_timestamp timestamptz, "
                     "details text, created_at timestamptz DEFAULT now())")
        conn.execute("INSERT INTO public.keyless (event_id, event_type, event_timestamp, details) "
                     "SELECT gen_random_uuid()::text, 'click', now() - interval '3 minutes', '{}' "
                     "FROM generate_series(1, 20)")
        conn.execute("INSERT INTO public.keyless (event_id, event_type, event_timestamp, details) VALUES "
                     "('c0ffee00-0000-4000-8000-000000000006', 'a', now() - interval '35 seconds', '{}'), "
                     "('c0ffee00-0000-4000-8000-000000000006', 'a', now() - interval '95 seconds', '{}')")
    run(settings, spark=spark)
    with source_db(settings) as conn:  # something else differs too, so the proof goes bucket by bucket
        conn.execute("DELETE FROM public.keyless WHERE event_id = "
                     "(SELECT event_id FROM public.keyless WHERE event_type = 'click' LIMIT 1)")
    with Pipeline(settings) as pipeline:
        check = pipeline.prove(None)
        assert not check.moved and len(check.extra) == 1 and not check.missing
        assert pipeline.repair(None).rows_removed == 1
        assert pipeline.prove(None).exact and pipeline.repair(None).exact


def test_status_compares_the_look_back_behind_the_watermark_its_own_read_sees(settings, spark, monkeypatch):
    """A load that commits while --status runs (a history's next part, every few seconds) moves the
    watermark between status's read of the lake and its identity check's: the rows it committed,
    dated after the watermark status read first, were compared as rows read ahead of the source's
    clock — each id looked up in the source, 10.6 s of a --status made during a 3M-row first load.
    The check goes by the watermark of its own read: no lookup, and nothing it says changes."""
    from pipeline.ops import status as status_module
    from pipeline.source import stats

    _loaded_and_fast(settings, spark)
    add_events(settings, 300, seed=403)  # dated after the watermark: the next load's
    looked_up: list[int] = []
    real_among, real_identity = stats.rows_among, status_module._identity

    def among(conn, table, ids, *args, **kwargs):
        looked_up.append(len(ids))
        return real_among(conn, table, ids, *args, **kwargs)

    def load_meanwhile(*args, **kwargs):  # status has read the lake; a load commits before its check
        run(settings, spark=spark)
        return real_identity(*args, **kwargs)

    monkeypatch.setattr(stats, "rows_among", among)
    monkeypatch.setattr(status_module, "_identity", load_meanwhile)
    status = collect(resolve(settings))
    assert looked_up == [], looked_up
    assert status.identity is not None and status.identity.exact, status.identity
    assert status.health.state == "healthy", status.health
    assert_lake_equals_source(settings)
