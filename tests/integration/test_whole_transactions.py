"""A transaction enters the lake in one image even when some of its rows are dated after the
source's clock (an application clock ahead of the database's, an event scheduled ahead): they are
read with the rest of their transaction, in one table or across the image's tables; rows dated ahead
in transactions of their own still wait until due (issue 53: "no transaction is ever split").
Every snapshot is checked."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from generators.events import EventFactory
from generators.writer import add_sessions, write_batch, write_linked
from pipeline.load.verify import compare as _compare
from pipeline.ops.status import collect
from pipeline.settings.resolve import resolve
from tests.conftest import load_settings
from tests.helpers import (
    add_events,
    assert_lake_equals_source,
    lake_query,
    run,
    snapshot_ids,
    source_db,
    source_table,
    torn_images,
)


def verify_compare(settings):
    return _compare(resolve(settings))


def _assert_whole_in_every_snapshot(settings, events, after: int) -> None:
    """Every lake snapshot after ``after`` holds all of ``events`` (one transaction's) or none."""
    ids = ", ".join(f"'{e.event_id}'" for e in events)
    for version in [v for v in snapshot_ids(settings) if v > after]:
        held = lake_query(settings, f"SELECT count(*) FROM {settings.lake_name}.main.events "
                                    f"AT (VERSION => {version}) WHERE event_id IN ({ids})")
        assert held in ([(0,)], [(len(events),)]), (version, held)


# ahead of the source's clock, but within the tolerance after which --status calls rows stale
AHEAD = timedelta(minutes=3)


@pytest.mark.parametrize("engine", ["dlt", "spark"])
def test_rows_of_a_transaction_dated_on_both_sides_of_the_instant_land_in_one_snapshot(settings, engine, spark):
    session = spark if engine == "spark" else None
    add_events(settings, 50, seed=301)
    run(settings, engine=engine, spark=session)
    table, now = source_table(settings), datetime.now(UTC)
    straddling = EventFactory(302).batch(6, now - timedelta(seconds=30)) + \
        [replace(e, event_timestamp=now + AHEAD) for e in EventFactory(303).batch(4, now)]
    alone_ahead = [replace(e, event_timestamp=now + AHEAD) for e in EventFactory(304).batch(3, now)]
    for events in (straddling, alone_ahead):  # two transactions
        with source_db(settings, autocommit=False) as conn:
            write_batch(conn, table, events)
    before = snapshot_ids(settings)[-1]
    report = run(settings, engine=engine, spark=session)
    # the transaction's four rows ahead came with its six; the three of a transaction of their own wait
    assert (report.rows_inserted, report.rows_in_future) == (10, 3), report
    _assert_whole_in_every_snapshot(settings, straddling, after=before)
    # loaded again while they are still ahead: held once, nothing more
    assert run(settings, engine="dlt").rows_inserted == 0
    assert lake_query(settings, f"SELECT count(*), count(DISTINCT event_id) FROM {settings.lake_name}.main.events"
                      ) == [(60, 60)]
    assert_lake_equals_source(settings)  # up to the source's clock
    status = collect(resolve(settings))
    assert status.health.state == "healthy", status.health.reasons


def test_rows_read_ahead_of_the_clock_and_changed_after_are_seen_by_every_check_and_repaired(settings):
    """Found by the adversary: rows loaded ahead of the source's clock were in no compared range,
    so one the source deleted or changed afterwards left --status healthy, --verify equal and
    --repair with nothing to do. They are compared by id and content after the watermark."""
    from pipeline.ops.pipeline import Pipeline

    add_events(settings, 20, seed=311)
    run(settings, engine="dlt")
    table, now = source_table(settings), datetime.now(UTC)
    ahead = [replace(e, event_timestamp=now + timedelta(hours=1)) for e in EventFactory(313).batch(3, now)]
    with source_db(settings, autocommit=False) as conn:
        write_batch(conn, table, EventFactory(312).batch(4, now - timedelta(seconds=30)) + ahead)
    assert run(settings, engine="dlt").rows_inserted == 7
    with source_db(settings) as conn:
        conn.execute(f"DELETE FROM {table} WHERE event_id = %s", (ahead[0].event_id,))
        conn.execute(f"UPDATE {table} SET details = details || '{{\"seen\": 1}}' WHERE event_id = %s",
                     (ahead[1].event_id,))
    status = collect(resolve(settings))
    assert status.health.state == "failing", status.health.reasons
    assert not verify_compare(settings).equal
    with Pipeline(settings, engine="dlt") as pipeline:
        check = pipeline.prove(None).tables["events"]
        assert (check.extra, check.changed) == ([ahead[0].event_id], [ahead[1].event_id]), check.describe()
        repaired = pipeline.repair(None)
        assert (repaired.rows_removed, repaired.rows_loaded) == (2, 1), repaired.summary()
        assert pipeline.prove(None).exact
    assert verify_compare(settings).equal
    assert collect(resolve(settings)).health.state == "healthy"
    assert lake_query(settings, f"SELECT details->>'seen' FROM {settings.lake_name}.main.events WHERE event_id = "
                                f"'{ahead[1].event_id}'") == [("1",)]


def test_a_session_and_its_events_dated_ahead_land_in_one_image(lake_env):
    env = {**lake_env, "SOURCE_TABLES": "public.sessions:started_at:session_id,public.events"}
    settings = resolve(load_settings(env))
    add_sessions(settings.source_dsn, "public.sessions", "public.events", 3, seed=305)
    run(settings, engine="dlt")
    # the sessions dated now, their events by a clock ten minutes ahead: one transaction
    sessions, events = EventFactory(306).sessions(4, datetime.now(UTC) - timedelta(seconds=20))
    with source_db(load_settings(env), autocommit=False) as conn:
        write_linked(conn, "public.sessions", sessions, "public.events",
                     [replace(e, event_timestamp=e.event_timestamp + timedelta(minutes=10)) for e in events])
    report = run(settings, engine="dlt")
    assert report.tables["events"].rows_inserted == len(events) and report.rows_in_future == 0, report
    assert torn_images(env) == []
    # rows dated that far ahead are stale when they wait; these are loaded, and wait for nothing
    status = collect(settings)
    assert status.health.state == "healthy", status.health.reasons


def test_a_late_transaction_straddling_reconciles_bound_is_backfilled_whole(settings):
    """--reconcile compares up to the watermark minus the look-back: of a late transaction's rows
    dated on both sides of that bound it backfilled the older ones, and the next load the rest, so
    the snapshot between held part of it. It takes the transaction's later rows with them now."""
    from pipeline.ops.pipeline import Pipeline

    add_events(settings, 50, seed=307)
    run(settings, engine="dlt")
    now = datetime.now(UTC)
    late = EventFactory(308).batch(5, now - timedelta(hours=3)) + EventFactory(309).batch(4, now - timedelta(minutes=1))
    with source_db(settings, autocommit=False) as conn:
        write_batch(conn, source_table(settings), late)
    before = snapshot_ids(settings)[-1]
    with Pipeline(settings, engine="dlt") as pipeline:
        assert pipeline.reconcile().rows_backfilled == 9
    _assert_whole_in_every_snapshot(settings, late, after=before)
    assert run(settings, engine="dlt").rows_inserted == 0
    assert_lake_equals_source(settings, expected_rows=59)
