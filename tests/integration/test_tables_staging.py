"""SOURCE_TABLES' hand-over through staging: a group extracted by one process and promoted by
another lands in one commit; a group still being extracted is left alone; one that lost a
table's batch for good is dropped and read again, never promoted in part."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from generators.events import EVENTS_PER_SESSION, EventFactory
from generators.writer import add_events as add_events_to
from generators.writer import add_sessions, write_batch, write_linked
from pipeline import staging
from pipeline.errors import ConfigError
from pipeline.ops.metrics import families
from pipeline.ops.observe import Observer
from pipeline.ops.pipeline import Pipeline
from pipeline.settings import load_settings
from pipeline.settings.model import TableSpec
from pipeline.settings.resolve import resolve
from pipeline.source.connect import connect
from tests.conftest import run_cli
from tests.helpers import assert_lake_equals_source, lake_query, run, torn_images

# the generator's sessions table names its own id and time columns (sql/source_sessions.sql)
SESSIONS, EVENTS = TableSpec("public.sessions", "started_at", "session_id"), TableSpec("public.events")
BOTH = "public.sessions:started_at:session_id,public.events"


def _linked(settings, sessions: int, seed: int, now: datetime | None = None) -> None:
    add_sessions(settings.source_dsn, SESSIONS.qualified, EVENTS.qualified, sessions, seed, now=now)


def _session_ids(settings) -> list[object]:
    with connect(settings.source_dsn) as conn:
        return [row[0] for row in conn.execute("SELECT session_id FROM public.sessions ORDER BY 1").fetchall()]


def _events_move_on(settings, now: datetime, seed: int) -> None:
    """Three events of a loaded session dated ``now``: the events table's watermark moves on alone."""
    with connect(settings.source_dsn, autocommit=False) as conn:
        lone = EventFactory(seed).batch(3, now)
        for event in lone:
            event.details["session_id"] = str(_session_ids(settings)[0])
        write_batch(conn, EVENTS.qualified, lone)


def _watermarks_apart(env: dict[str, str], seed: int):
    """Both tables loaded with 5 sessions 10 min ago, then the events table's watermark moved on
    alone to now, then 2 more linked sessions dated 5 min ago, not loaded: the settings."""
    both = resolve(load_settings(env))
    now = datetime.now(UTC)
    _linked(both, 5, seed=seed, now=now - timedelta(minutes=10))
    run(both, engine="dlt")
    _events_move_on(both, now, seed=seed + 1)
    run(both, engine="dlt")
    _linked(both, 2, seed=seed + 2, now=now - timedelta(minutes=5))
    return both


def _staged(settings) -> dict[str, list[staging.StagedBatch]]:
    return {t.name: staging.complete_batches(staging.table_dir(settings, t)) for t in settings.tables}


def test_a_group_staged_by_one_run_is_promoted_by_another_in_one_commit(settings):
    both = resolve(replace(settings, tables=(SESSIONS, EVENTS)))
    _linked(both, 30, seed=1)
    run(both, "extract", engine="dlt")
    staged = _staged(both)
    assert [len(b) for b in staged.values()] == [1, 1]
    group = staged["sessions"][0].manifest.group
    assert group and staged["events"][0].manifest.group == group
    assert staged["events"][0].manifest.group_batches == {
        "sessions": staged["sessions"][0].batch_id, "events": staged["events"][0].batch_id}
    report = run(both, "promote", engine="dlt")
    assert report.rows_inserted == 30 + 90 and len(set(report.snapshots)) == 1
    [(message, extra)] = lake_query(both, f"SELECT commit_message, commit_extra_info FROM {both.lake_name}"
                                          f".snapshots() WHERE snapshot_id = {report.snapshots[0]}")
    assert "sessions 30 row(s)" in message and "events 90 row(s)" in message
    assert json.loads(extra)["group"] == group
    # /metrics counts every table's rows, and each table's by its label
    observed = Observer(both, ttl=0).observe()
    samples = {(s.name, tuple(s.labels.values())): s.value for f in families(observed) for s in f.samples}
    assert samples[("event_lake_rows_loaded_total", ())] == 120
    assert samples[("event_lake_table_rows_loaded_total", ("sessions",))] == 30
    assert samples[("event_lake_table_rows_loaded_total", ("events",))] == 90
    assert samples[("event_lake_table_lake_rows", ("events",))] == 90
    # --status: the last hour and the last batches are every table's (were the first table's)
    status = observed.status
    assert status is not None and status.last_hour is not None
    assert (status.last_hour["rows_read"], status.last_hour["rows_inserted"]) == (120, 120)
    assert {b["table_name"] for b in status.last_batches} == {"sessions", "events"}
    assert _staged(both) == {"sessions": [], "events": []}
    assert_lake_equals_source(both)


def test_a_group_missing_a_batch_waits_for_its_live_process_then_is_dropped_and_read_again(settings):
    both = resolve(replace(settings, tables=(SESSIONS, EVENTS)))
    _linked(both, 20, seed=2)
    run(both, "extract", engine="dlt")
    staged = _staged(both)
    group = staged["sessions"][0].manifest.group
    staging.remove_batch(staged["events"][0].folder)  # as if its extraction had not finished
    # the group's process still runs (its claim names a live process of this host: this one)
    sessions_dir = staging.table_dir(both, SESSIONS)
    sessions_dir.child(staging.RUNNING).make(exist_ok=True)
    with open(f"/proc/{os.getpid()}/stat") as stat:
        started = stat.read().rsplit(")", 1)[1].split()[19]
    sessions_dir.child(staging.RUNNING).write_text(f"{group}.json", json.dumps(
        {"batch_id": group, "host": socket.gethostname(), "pid": os.getpid(), "started": started}))
    waiting = run(both, "promote", engine="dlt")
    assert waiting.rows_inserted == 0 and len(_staged(both)["sessions"]) == 1  # left alone, not promoted
    staging.release_batch(sessions_dir, group)  # the process ended without completing the group
    report = run(both, engine="dlt")
    assert _staged(both) == {"sessions": [], "events": []}
    assert report.rows_inserted == 20 + 60 and len(set(report.snapshots)) == 1  # read again, whole
    assert_lake_equals_source(both)


def test_a_quiet_table_does_not_cut_its_partners_look_back(lake_env):
    """Adversary: the events table's watermark ran ahead on rows of its own, and a session with its
    events dated 3 min ago (look-back 1 min) loaded the session and never the events: each table's
    window began at its own watermark. One floor for every table: both or neither."""
    env = {**lake_env, "SOURCE_TABLES": BOTH, "LOOKBACK": "1m"}
    both = resolve(load_settings(env))
    now = datetime.now(UTC)
    _linked(both, 10, seed=3)  # makes the tables
    with connect(both.source_dsn) as conn:
        conn.execute("DELETE FROM public.sessions")
        conn.execute("DELETE FROM public.events")
    _linked(both, 10, seed=4, now=now - timedelta(minutes=5))
    run(both, engine="dlt")
    with connect(both.source_dsn, autocommit=False) as conn:  # events alone: its watermark moves on
        lone = EventFactory(5).batch(1, datetime.now(UTC))
        lone[0].details["session_id"] = str(_session_ids(both)[0])  # of a loaded session: no torn image
        write_batch(conn, EVENTS.qualified, lone)
    run(both, engine="dlt")
    _linked(both, 10, seed=6, now=now - timedelta(minutes=3))  # behind events' own look-back
    run(both, engine="dlt")
    assert torn_images(env) == []
    assert_lake_equals_source(both)


@pytest.mark.parametrize("key", ["SOURCE_TABLE", "SOURCE_TABLES"])
def test_a_run_leaving_out_a_table_of_its_image_is_refused_unless_it_leaves_on_purpose(lake_env, key):
    """However the one table is written, a run without its image's other table is refused (a job
    that lost part of its environment); LEAVE_IMAGE leaves the image once, and from then on the
    table loads alone."""
    env = {**lake_env, "SOURCE_TABLES": BOTH}
    both = resolve(load_settings(env))
    _linked(both, 10, seed=7)
    run(both, engine="dlt")
    _linked(both, 10, seed=8)
    alone = load_settings({**lake_env, key: EVENTS.qualified})
    with pytest.raises(ConfigError) as refused:
        run(alone, engine="dlt")
    assert "loaded as one image with sessions" in str(refused.value) and "LEAVE_IMAGE" in refused.value.hint
    assert torn_images(env) == []
    on_purpose = load_settings({**lake_env, key: EVENTS.qualified, "LEAVE_IMAGE": "true"})
    assert run(on_purpose, engine="dlt").rows_inserted == 30
    _linked(both, 5, seed=9)
    assert run(alone, engine="dlt").rows_inserted == 15  # its image is itself now


def test_a_table_of_the_image_that_had_no_rows_last_time_still_holds_it_together(lake_env):
    """Adversary: the rule read the tables of a table's last group, which holds only the tables
    that had rows: after a load where only events had any, events alone was loaded without a word.
    Each commit records every table of its image."""
    env = {**lake_env, "SOURCE_TABLES": BOTH}
    both = resolve(load_settings(env))
    _linked(both, 5, seed=21)
    run(both, engine="dlt")
    _events_move_on(both, datetime.now(UTC), seed=22)  # events alone get rows: a group of one batch
    assert run(both, engine="dlt").tables["sessions"].rows_inserted == 0
    with pytest.raises(ConfigError) as refused:
        run(load_settings({**lake_env, "SOURCE_TABLE": EVENTS.qualified}), engine="dlt")
    assert "loaded as one image with sessions" in str(refused.value)


def test_a_reconcile_or_repair_of_one_table_of_an_image_is_refused_and_a_rejoined_image_holds(lake_env):
    """Adversary: --reconcile and --repair of events alone were not refused and committed torn
    snapshots (and their commits then let a one-table --run through); after leaving the image and
    rejoining it in a load where events had no rows, events alone loaded again without a word."""
    env = {**lake_env, "SOURCE_TABLES": BOTH}
    both = resolve(load_settings(env))
    _linked(both, 5, seed=31)
    run(both, engine="dlt")
    alone = load_settings({**lake_env, "SOURCE_TABLE": EVENTS.qualified})
    for refused_job in (lambda p: p.reconcile(), lambda p: p.repair(None)):
        with Pipeline(alone, engine="dlt") as pipeline, pytest.raises(ConfigError) as refused:
            refused_job(pipeline)
        assert "loaded as one image with sessions" in str(refused.value)
    _events_move_on(both, datetime.now(UTC), seed=32)
    leaving = load_settings({**lake_env, "SOURCE_TABLE": EVENTS.qualified, "LEAVE_IMAGE": "true"})
    assert run(leaving, engine="dlt").rows_inserted == 3
    _linked(both, 2, seed=33)
    with connect(both.source_dsn) as conn:  # the sessions alone have rows this time
        conn.execute("DELETE FROM public.events WHERE event_timestamp > now() - interval '1 minute' "
                     "AND details->>'session_id' IN (SELECT session_id::text FROM public.sessions "
                     "WHERE started_at > now() - interval '1 minute')")
    assert run(both, engine="dlt").tables["events"].rows_inserted == 0  # rejoined
    with pytest.raises(ConfigError):
        run(alone, engine="dlt")


def test_a_group_set_aside_comes_back_whole_from_either_table(lake_env):
    """Adversary: --retry-failed of one table restored its batch alone, and the next pass dropped it
    as 'lost in a crash'. Restoring one batch of a group restores the group; a group with one batch
    set aside keeps the others with it."""
    env = {**lake_env, "SOURCE_TABLES": BOTH}
    both = resolve(load_settings(env))
    _linked(both, 15, seed=9)
    run(both, "extract", engine="dlt")
    staged = _staged(both)
    events_dir = staging.table_dir(both, EVENTS)
    staging.set_aside(events_dir, staged["events"][0], "a cause, since fixed")
    kept = run(both, "promote", engine="dlt")  # the sessions batch joins its group aside
    assert kept.rows_inserted == 0 and _staged(both) == {"sessions": [], "events": []}
    assert len(staging.failed_batches(staging.table_dir(both, SESSIONS))) == 1
    with Pipeline(load_settings({**lake_env, "SOURCE_TABLE": EVENTS.qualified}), engine="dlt") as one:
        report = one.retry_failed()  # from the events table alone: the whole group comes back
    assert report.rows_inserted == 15 + 45 and len(set(report.snapshots)) == 1
    assert torn_images(env) == []
    assert_lake_equals_source(both)


def test_the_generator_writes_the_table_it_is_given_whatever_source_tables_says(lake_env):
    env = {**lake_env, "SOURCE_TABLES": BOTH}
    unnamed = run_cli("insert_event_data_loop.py", "--rows", "10", "--quiet", env=env)
    assert unnamed.returncode == 1 and "SOURCE_TABLES is set" in unnamed.stderr + unnamed.stdout
    named = run_cli("insert_event_data_loop.py", "--table", "public.clicks", "--rows", "10", "--quiet", env=env)
    assert named.returncode == 0, named.stdout + named.stderr
    with connect(resolve(load_settings(lake_env)).source_dsn) as conn:
        [(clicks, sessions)] = conn.execute("SELECT (SELECT count(*) FROM public.clicks), "
                                            "to_regclass('public.sessions') IS NOT NULL").fetchall()
    assert (clicks, sessions) == (10, False)


def test_late_linked_rows_beyond_the_look_back_are_reconciled_in_one_commit(lake_env):
    """--reconcile compares every table and backfills them in one commit: a session and its events
    that reached the source hours late land together, with every column of the session's own."""
    env = {**lake_env, "SOURCE_TABLES": BOTH, "LOOKBACK": "1m"}
    both = resolve(load_settings(env))
    _linked(both, 10, seed=11)
    run(both, engine="dlt")
    _linked(both, 5, seed=12, now=datetime.now(UTC) - timedelta(hours=3))  # late, beyond the look-back
    with connect(both.source_dsn) as conn:  # a replay that stamps when they were meant: no arrival finds them
        conn.execute("UPDATE public.sessions SET created_at = started_at WHERE started_at < now() - interval '1 hour'")
        conn.execute("UPDATE public.events SET created_at = event_timestamp "
                     "WHERE event_timestamp < now() - interval '1 hour'")
    assert run(both, engine="dlt").rows_inserted == 0  # no window holds them
    with Pipeline(both, engine="dlt") as pipeline:
        report = pipeline.reconcile()
    assert {name: part.rows_backfilled for name, part in report.tables.items()} == {"sessions": 5, "events": 15}
    assert report.rows_backfilled == 20 and report.snapshot_id is not None, report.summary()
    [(message,)] = lake_query(both, f"SELECT commit_message FROM {both.lake_name}.snapshots() "
                                    f"WHERE snapshot_id = {report.snapshot_id}")
    assert "sessions 5 row(s)" in message and "events 15 row(s)" in message
    assert torn_images(env) == []
    assert_lake_equals_source(both)
    [(without_user,)] = lake_query(both, f"SELECT count(*) FROM {both.lake_name}.main.sessions WHERE user_id IS NULL")
    assert without_user == 0
    assert _staged(both) == {"sessions": [], "events": []}


def test_linked_rows_committed_behind_the_look_back_load_together_whatever_finds_them(lake_env):
    """A transaction open longer than LOOKBACK writes a session and its events dated before every
    window. The events' arrival column finds them; the sessions table has none. The events' window
    reaches back, and so does the sessions' (read whole there): one image holds both, not the events
    an image (or a day, until --reconcile) before their session."""
    env = {**lake_env, "SOURCE_TABLES": BOTH, "LOOKBACK": "1m"}
    both = resolve(load_settings(env))
    _linked(both, 10, seed=13)
    with connect(both.source_dsn) as conn:
        conn.execute("ALTER TABLE public.sessions DROP COLUMN created_at")
    run(both, engine="dlt")
    made, events = EventFactory(14).sessions(5, datetime.now(UTC) - timedelta(hours=3))
    with connect(both.source_dsn, autocommit=False) as conn:
        write_linked(conn, SESSIONS.qualified, made, EVENTS.qualified, events)
    report = run(both, engine="dlt")
    assert {name: part.rows_inserted for name, part in report.tables.items()} == {"sessions": 5, "events": 15}
    assert torn_images(env) == []
    assert_lake_equals_source(both)


def test_a_repair_of_several_tables_is_one_commit(lake_env):
    """--repair compares every table in one source snapshot and replaces their rows in one commit."""
    env = {**lake_env, "SOURCE_TABLES": BOTH}
    both = resolve(load_settings(env))
    _linked(both, 10, seed=21)
    run(both, engine="dlt")
    session = _session_ids(both)[0]
    with connect(both.source_dsn) as conn:  # a session and its events deleted after loading
        conn.execute("DELETE FROM public.events WHERE details->>'session_id' = %s", (str(session),))
        conn.execute("DELETE FROM public.sessions WHERE session_id = %s", (session,))
    with Pipeline(both, engine="dlt") as pipeline:
        report = pipeline.repair(None)
    assert {name: part.rows_removed for name, part in report.tables.items()} == {"sessions": 1, "events": 3}
    [(message,)] = lake_query(both, f"SELECT commit_message FROM {both.lake_name}.snapshots() "
                                    f"WHERE snapshot_id = {report.snapshot_id}")
    assert message.startswith("sessions repair") and "; events repair" in message, message
    assert torn_images(env) == []
    assert_lake_equals_source(both)


def test_verify_and_prove_from_python_see_every_table_not_the_first_alone(lake_env):
    """Pipeline.verify() and prove() speak of the image: a row deleted from the second table's
    source after loading makes both differ, named by that table (they checked the first alone)."""
    env = {**lake_env, "SOURCE_TABLES": BOTH}  # sessions listed first, events second
    both = resolve(load_settings(env))
    _linked(both, 3, seed=25)
    run(both, engine="dlt")
    with Pipeline(both, engine="dlt") as pipeline:
        assert pipeline.verify().equal and pipeline.prove(None).exact
        with connect(both.source_dsn) as conn:
            [(gone,)] = conn.execute("DELETE FROM public.events WHERE event_id = "
                                     "(SELECT event_id FROM public.events ORDER BY 1 LIMIT 1) RETURNING event_id").fetchall()
        comparison, check = pipeline.verify(), pipeline.prove(None)
    assert not comparison.equal and list(comparison.tables) == ["sessions", "events"]
    assert comparison.tables["sessions"].equal and not comparison.tables["events"].equal
    assert "events: LAKE DIFFERS FROM SOURCE" in comparison.describe(), comparison.describe()
    assert not check.exact and check.tables["sessions"].exact, check.describe()
    assert check.extra == [gone] and check.tables["events"].extra == [gone], check.describe()


def test_a_table_with_nothing_loaded_yet_holds_no_other_table_back(lake_env):
    """Found by the adversary: a listed table whose source has no rows yet stopped --verify --since,
    --repair and prove() for every table ("Nothing has been loaded yet"); --changes without --table
    read the first table listed. The loaded tables are proven and repaired, the empty one said; a
    one-table operation on several tables asks which; one commit is one snapshot in the report."""
    env = {**lake_env, "SOURCE_TABLES": "public.events,public.clicks"}
    both = resolve(load_settings(env))
    add_events_to(both.source_dsn, "public.events", 20, seed=41)
    with connect(both.source_dsn) as conn:  # clicks exists, empty
        conn.execute("CREATE TABLE public.clicks (LIKE public.events INCLUDING ALL)")
    report = run(both, engine="dlt")
    assert report.tables["events"].rows_inserted == 20 and report.tables["clicks"].rows_inserted == 0
    assert len(report.snapshots) == len(set(report.snapshots)) == 1, report.as_dict()
    [loaded] = report.snapshots
    with connect(both.source_dsn) as conn:
        conn.execute("DELETE FROM public.events WHERE event_id = (SELECT event_id FROM public.events LIMIT 1)")
    with Pipeline(both, engine="dlt") as pipeline:
        check = pipeline.prove(None)
        assert list(check.tables) == ["events"] and check.not_loaded == ("clicks",)
        assert len(check.extra) == 1 and "clicks: nothing loaded yet" in check.describe(), check.describe()
        assert pipeline.repair(None).tables["events"].rows_removed == 1
        assert pipeline.prove(None).exact
        with pytest.raises(ConfigError, match=r"2 tables \(main.events, main.clicks\): say which one"):
            pipeline.changes(loaded, loaded)
        assert pipeline.changes(loaded, loaded, table="main.events").num_rows == 20
    add_events_to(both.source_dsn, "public.clicks", 5, seed=42)
    add_events_to(both.source_dsn, "public.events", 5, seed=43, now=datetime.now(UTC) + timedelta(hours=2))
    report = run(both, engine="dlt")
    assert report.rows_in_future == report.tables["events"].rows_in_future == 5, report.as_dict()
    assert_lake_equals_source(both)


def test_a_repair_whose_lock_was_lost_commits_nothing(lake_env, monkeypatch):
    """Repair commits through the lake's one commit: fenced as a promotion is. A repair whose promote
    lock's connection died before COMMIT (another process may hold the lock now) rolls back; the
    next repair does the work, its snapshot found by its own commit."""
    from pipeline.errors import CatalogUnavailable
    from tests import faults

    env = {**lake_env, "SOURCE_TABLES": "public.events,public.sessions:started_at:session_id"}
    both = resolve(load_settings(env))
    _linked(both, 4, seed=23)
    run(both, engine="dlt")
    session = _session_ids(both)[0]
    with connect(both.source_dsn) as conn:
        conn.execute("DELETE FROM public.events WHERE details->>'session_id' = %s", (str(session),))
        conn.execute("DELETE FROM public.sessions WHERE session_id = %s", (session,))
    snapshots = f"SELECT count(*) FROM {both.lake_name}.snapshots()"
    [(before,)] = lake_query(both, snapshots)
    with monkeypatch.context() as patch:
        faults.install("lose-lock", patch.setattr)
        with Pipeline(both, engine="dlt") as pipeline, pytest.raises(CatalogUnavailable, match="Lost the"):
            pipeline.repair(None)
    assert lake_query(both, snapshots) == [(before,)]  # nothing committed
    [(sessions, events)] = lake_query(both, f"SELECT (SELECT count(*) FROM {both.lake_name}.main.sessions), "
                                            f"(SELECT count(*) FROM {both.lake_name}.main.events)")
    assert (sessions, events) == (4, 12)  # the lake as it was: the deleted session's rows kept
    with Pipeline(both, engine="dlt") as pipeline:
        report = pipeline.repair(None)
    assert {name: part.rows_removed for name, part in report.tables.items()} == {"events": 3, "sessions": 1}
    [(info,)] = lake_query(both, f"SELECT commit_extra_info FROM {both.lake_name}.snapshots() "
                                 f"WHERE snapshot_id = {report.snapshot_id}")
    assert "repair" in json.loads(info)
    assert_lake_equals_source(both)


def test_a_table_added_to_a_loaded_lake_catches_up_in_bounded_batches_without_holding_the_others_back(lake_env):
    """A table added to SOURCE_TABLES on a loaded lake reads its history BACKFILL_BATCH_ROWS at a
    time, each part committed, all in one run, while the other tables load what arrived as before."""
    env = {**lake_env, "SOURCE_TABLES": "public.events", "BACKFILL_BATCH_ROWS": "100"}
    alone = resolve(load_settings(env))
    add_events_to(alone.source_dsn, "public.events", 30, seed=31)
    run(alone, engine="dlt")
    add_events_to(alone.source_dsn, "public.clicks", 250, seed=32)  # its history, before it is listed
    both = resolve(load_settings({**env, "SOURCE_TABLES": "public.events,public.clicks"}))
    add_events_to(both.source_dsn, "public.events", 5, seed=33)
    report = run(both, engine="dlt")
    events, clicks = report.tables["events"], report.tables["clicks"]
    assert events.rows_inserted == 5, events.summary()  # not held back, nor reading clicks' history
    assert (clicks.rows_read, clicks.rows_inserted, clicks.catching_up) == (250, 250, False), clicks.summary()
    # three parts, each its own snapshot: the first with the events that arrived
    assert [(p.rows_read, len(p.snapshots)) for p in report.parts] == [(105, 1), (100, 1), (50, 1)], report.parts
    for seed in range(34, 36):  # then both tables load what arrives, no part any more
        add_events_to(both.source_dsn, "public.events", 5, seed=seed)
        report = run(both, engine="dlt")
        assert (report.tables["events"].rows_inserted, report.tables["clicks"].rows_read, report.parts) == (5, 0, [])
    assert_lake_equals_source(both)


def test_a_reconcile_of_tables_with_different_watermarks_backfills_them_over_one_range(lake_env):
    """Found by the adversary: each table's range ended at its own watermark's look-back, so a late
    session and its events dated between the two bounds were backfilled in one table only (a torn
    snapshot until the next load). One range for the group: the oldest watermark's."""
    env = {**lake_env, "SOURCE_TABLES": BOTH, "LOOKBACK": "1m"}
    both = _watermarks_apart(env, seed=51)  # the two new sessions: inside events' range only, before
    with Pipeline(both, engine="dlt") as pipeline:
        report = pipeline.reconcile()
    assert report.rows_backfilled == 0, report.summary()  # neither: the next load reads both
    assert torn_images(env) == []
    assert run(both, engine="dlt").rows_inserted == 2 + 6
    assert torn_images(env) == []
    assert_lake_equals_source(both)


def test_a_repair_takes_out_only_a_session_the_source_moved_past_its_clock(lake_env):
    """Found by the adversary: --repair took out a session the source moved past the watermark and
    its snapshot held the session's events alone. A session moved past the source's clock is no
    row of the source's image now (it waits for its time, as a load would leave it): the repair
    takes it out — only it — and time travel keeps it; its events stay, as the source holds them."""
    env = {**lake_env, "SOURCE_TABLES": BOTH}
    both = resolve(load_settings(env))
    _linked(both, 10, seed=61, now=datetime.now(UTC) - timedelta(minutes=1))
    run(both, engine="dlt")
    session = _session_ids(both)[0]
    [(events_before,)] = lake_query(both, f"SELECT count(*) FROM {both.lake_name}.main.events")
    with connect(both.source_dsn) as conn:
        conn.execute("UPDATE public.sessions SET started_at = now() + interval '1 hour' WHERE session_id = %s",
                     (session,))
    [(before,)] = lake_query(both, f"SELECT max(snapshot_id) FROM {both.lake_name}.snapshots()")
    with Pipeline(both, engine="dlt") as pipeline:
        pipeline.repair(None)
    # the repair's snapshot holds the session's events without it, as the source does now
    assert torn_images(env) == [f"snapshot {before + 1}: {EVENTS_PER_SESSION} event(s) without their "
                                f"session, 0 session(s) without all {EVENTS_PER_SESSION} events"]
    [(kept,)] = lake_query(both, f"SELECT count(*) FROM {both.lake_name}.main.sessions "
                                 f"WHERE session_id = '{session}'")
    [(then,)] = lake_query(both, f"SELECT count(*) FROM {both.lake_name}.main.sessions AT (VERSION => {before}) "
                                 f"WHERE session_id = '{session}'")
    assert (kept, then) == (0, 1)
    assert lake_query(both, f"SELECT count(*) FROM {both.lake_name}.main.events") == [(events_before,)]


def test_a_repair_of_tables_with_different_watermarks_compares_them_over_one_range(lake_env):
    """Found by the adversary: each table's range ended at its own watermark, so a session and its
    events dated between the two were repaired in one table only (a torn snapshot)."""
    env = {**lake_env, "SOURCE_TABLES": BOTH}
    both = _watermarks_apart(env, seed=71)  # the two new sessions: between the two watermarks
    with Pipeline(both, engine="dlt") as pipeline:
        pipeline.repair(None)
    assert torn_images(env) == []
    assert run(both, engine="dlt").rows_inserted == 2 + 6
    assert torn_images(env) == []


def test_a_catch_up_part_whose_rows_are_all_quarantined_does_not_stall_it(lake_env):
    """Found by the adversary: the next part started at the table's watermark, which a part of
    quarantined rows does not move, so the same part was read again on every run, forever."""
    env = {**lake_env, "SOURCE_TABLES": "public.events", "BACKFILL_BATCH_ROWS": "50"}
    alone = resolve(load_settings(env))
    add_events_to(alone.source_dsn, "public.events", 10, seed=81)
    run(alone, engine="dlt")
    with connect(alone.source_dsn) as conn:
        # a text key may be any text; a NULL one cannot be loaded (UNIQUE lets several be NULL)
        conn.execute("CREATE TABLE public.tq (id text UNIQUE, ts timestamptz NOT NULL)")
        conn.execute("INSERT INTO public.tq SELECT NULL, now() - interval '2 days' + g * interval '1 s' "
                     "FROM generate_series(1, 100) g")
        conn.execute("INSERT INTO public.tq SELECT gen_random_uuid()::text, now() - interval '1 day' + "
                     "g * interval '1 s' FROM generate_series(1, 100) g")
    both = resolve(load_settings({**env, "SOURCE_TABLES": "public.events,public.tq:ts:id"}))
    report = run(both, engine="dlt")
    tq = report.tables["tq"]
    assert (tq.rows_inserted, tq.rows_quarantined, tq.catching_up) == (100, 100, False), tq.summary()
    # four parts of 50 (the last read whole: no row after it), none empty
    assert len(report.parts) == 4 and all(p.rows_read for p in report.parts), report.parts


def test_a_table_catching_up_does_not_hide_the_others_differences_from_prove_and_repair(lake_env):
    """Found by the adversary: prove, repair and reconcile bounded every table by the oldest
    watermark, a catching-up table's (days behind) included, so the others were compared over an
    empty range and a row deleted from the source went unseen. Listed first, on purpose."""
    env = {**lake_env, "SOURCE_TABLES": "public.events", "BACKFILL_BATCH_ROWS": "5"}
    alone = resolve(load_settings(env))
    add_events_to(alone.source_dsn, "public.events", 30, seed=91)
    run(alone, engine="dlt")
    add_events_to(alone.source_dsn, "public.clicks", 40, seed=92, now=datetime.now(UTC) - timedelta(days=10))
    both = resolve(load_settings({**env, "SOURCE_TABLES": "public.clicks,public.events"}))
    # one part of its history committed (staged alone, then promoted: the state a load killed after
    # its first part leaves)
    run(both, "extract", engine="dlt")
    run(both, "promote", engine="dlt")
    with Pipeline(both, engine="dlt") as pipeline:
        assert pipeline.status().tables["clicks"].catching_up
    with connect(both.source_dsn) as conn:  # two loaded events deleted in the source
        gone = [row[0] for row in conn.execute(
            "DELETE FROM public.events WHERE event_id IN (SELECT event_id FROM public.events ORDER BY 1 "
            "LIMIT 2) RETURNING event_id").fetchall()]
    with Pipeline(both, engine="dlt") as pipeline:
        check = pipeline.prove(timedelta(days=1))
        assert sorted(map(str, check.tables["events"].extra)) == sorted(map(str, gone)), check.describe()
        assert check.tables["clicks"].exact, check.describe()  # over its own range, behind
        repaired = pipeline.repair(timedelta(days=1))
        assert repaired.tables["events"].rows_removed == 2, repaired.summary()
        assert pipeline.prove(timedelta(days=1)).exact


def test_the_status_of_an_image_says_every_tables_source_whichever_is_listed_first(lake_env):
    """Found by the adversary: --status's source fields (the newest event, rows dated in the future,
    the source up or down) and /metrics' source_up were the first listed table's."""
    both = resolve(load_settings({**lake_env, "SOURCE_TABLES": BOTH}))
    _linked(both, 5, seed=95, now=datetime.now(UTC) - timedelta(minutes=1))
    run(both, engine="dlt")
    with connect(both.source_dsn) as conn:  # one event dated tomorrow: the events table's alone
        conn.execute("INSERT INTO public.events VALUES (gen_random_uuid(), 'click', now() + interval '1 day', "
                     "'{}')")
    orders = [both, replace(both, tables=(EVENTS, SESSIONS))]

    def whole(settings):
        with Pipeline(settings, engine="dlt") as pipeline:
            status = pipeline.status()
        samples = {s.name: s.value for f in families(Observer(settings, ttl=0).observe()) for s in f.samples}
        return (status.source_rows_in_future, status.source_newest_event, status.source_up,
                samples["event_lake_source_up"])

    assert [whole(settings) for settings in orders] == [whole(orders[0])] * 2
    assert whole(orders[0])[0] == 1 and whole(orders[0])[2] is True
    with connect(both.source_dsn) as conn:
        conn.execute("ALTER TABLE public.events RENAME TO events_gone")
    for settings in orders:
        rows_in_future, _, up, up_sample = whole(settings)
        assert not up and up_sample == 0, settings.tables


def test_first_loads_of_two_tables_in_parts_keep_every_snapshot_one_image(lake_env):
    """A first load of several tables reads their histories in parts that end at one bound (the
    earliest of their parts'): every snapshot holds each session with all its events (issue 54)."""
    env = {**lake_env, "SOURCE_TABLES": BOTH, "BACKFILL_BATCH_ROWS": "10"}
    both = resolve(load_settings(env))
    for day in range(4):  # sessions and their events over four days, a transaction a day
        _linked(both, 5, seed=60 + day, now=datetime.now(UTC) - timedelta(days=4 - day))
    report = run(both, engine="dlt")
    assert len(report.parts) >= 4 and report.rows_inserted == 20 + 60, report.summary()
    assert all(len(part.snapshots) <= 1 for part in report.parts), report.parts
    assert torn_images(env) == []
    assert_lake_equals_source(both, expected_rows={"sessions": 20, "events": 60})


def test_a_table_no_load_has_listed_is_stale_not_healthy_until_its_first_load(lake_env, cli):
    """Found by the adversary: a table added to SOURCE_TABLES on a loaded lake (a scheduler still
    running with the list before it loads the others, never it) said HEALTHY with no watermark:
    the other tables' load was taken as its success. A load's record lists its tables now."""
    env = {**lake_env, "SOURCE_TABLES": "public.events"}
    alone = resolve(load_settings(env))
    add_events_to(alone.source_dsn, "public.events", 20, seed=61)
    add_events_to(alone.source_dsn, "public.clicks", 30, seed=62)
    # a load as a user runs it: recorded in the job history (the lake's last successful load)
    assert cli("--run", "--engine", "dlt", env=env).returncode == 0
    both = {**env, "SOURCE_TABLES": "public.events,public.clicks"}
    status = json.loads(cli("--status", "--json", env=both).stdout)
    clicks = status["tables"]["clicks"]
    assert clicks["health"]["state"] == "stale" and clicks["watermark"] is None, clicks
    assert any("nothing loaded yet, while the source holds 30 row(s)" in r for r in clicks["health"]["reasons"])
    assert status["tables"]["events"]["health"]["state"] == "healthy", status["tables"]["events"]
    assert status["health"]["state"] == "stale", status["health"]
    assert cli("--run", "--engine", "dlt", env=both).returncode == 0
    status = json.loads(cli("--status", "--json", env=both).stdout)
    assert status["health"]["state"] == "healthy" and status["tables"]["clicks"]["watermark"], status["health"]
