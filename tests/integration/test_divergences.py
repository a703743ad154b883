"""What a load saw, the status says: rows the source deleted, moved or changed after loading, found
by a load's identity check over a range --status no longer compares (behind its look-back), keep
--status FAILING, naming them and the repair, until the advised repair makes lake == source by id
and content; a row moved into the future is removed by the repair and loaded when due."""

from __future__ import annotations

import json
from datetime import timedelta

from pipeline.settings import load_settings
from tests.conftest import run_main
from tests.helpers import assert_lake_equals_source, lake_query, run, source_db, write_payloads


def _status(env: dict[str, str]) -> tuple[int, dict]:
    result = run_main("--status", "--json", env=env)
    return result.returncode, json.loads(result.stdout)


def test_a_divergence_a_load_saw_keeps_status_failing_until_the_advised_repair(lake_env):
    settings = load_settings(lake_env)
    write_payloads(settings, [("page_view", json.dumps({"n": i})) for i in range(300)], ago=timedelta(hours=3))
    assert run(settings, engine="dlt").rows_inserted == 300
    with source_db(settings) as conn:  # behind every look-back: changed in place by the application
        ids = [row[0] for row in conn.execute("SELECT event_id FROM public.events ORDER BY event_id").fetchall()]
        conn.execute("UPDATE public.events SET details = '{\"n\": -1}' WHERE event_id = ANY(%s)", [ids[:7]])
        conn.execute("DELETE FROM public.events WHERE event_id = ANY(%s)", [ids[7:12]])
        conn.execute("UPDATE public.events SET event_timestamp = event_timestamp + interval '10 minutes' "
                     "WHERE event_id = ANY(%s)", [ids[12:15]])
    write_payloads(settings, [("page_view", "{}")] * 2, ago=timedelta(minutes=1))
    # the updated rows were committed since the last load: the load reads back to them, and its check
    # sees every change there (the re-read rows compared by content, not dropped as duplicates)
    report = run(settings, engine="dlt")
    assert report.rows_inserted == 2, report
    code, status = _status(lake_env)
    assert code == 2, status["health"]
    [seen] = status["divergences"]
    assert (seen["extra"], seen["moved"], seen["changed"]) == (5, 3, 7), seen
    [reason] = [r for r in status["health"]["reasons"] if "until repaired" in r]
    assert "--repair --since 4h" in reason and seen["low"][:13] in reason, reason
    # another load, nothing new: still failing (the look-back has moved on; what was seen is kept)
    run(settings, engine="dlt")
    assert _status(lake_env)[0] == 2

    repaired = run_main("--repair", "--json", env=lake_env)
    assert repaired.returncode == 0, repaired.stderr
    code, status = _status(lake_env)
    assert code == 0 and status["divergences"] == [], status["health"]
    assert_lake_equals_source(settings, 300 - 5 + 2)
    assert lake_query(settings, "SELECT count(*) FROM lake.main.events WHERE details->>'n' = '-1'")[0][0] == 7


def test_a_row_moved_into_the_future_after_loading_is_taken_out_by_the_repair_and_waits(lake_env):
    """A loaded row the source then moves three days ahead: the repair takes the lake's old version
    out (time travel keeps it), --status counts the row as future-dated and is HEALTHY, verify equal;
    a row dated 2099 does not make --status STALE."""
    settings = load_settings(lake_env)
    write_payloads(settings, [("page_view", json.dumps({"n": i})) for i in range(50)], ago=timedelta(hours=2))
    assert run(settings, engine="dlt").rows_inserted == 50
    with source_db(settings) as conn:
        [[moved]] = conn.execute("SELECT event_id FROM public.events ORDER BY event_id LIMIT 1").fetchall()
        conn.execute("UPDATE public.events SET event_timestamp = now() + interval '3 days' WHERE event_id = %s",
                     [moved])
    write_payloads(settings, [("page_view", "{}")], ago=timedelta(minutes=1))
    run(settings, engine="dlt")
    code, status = _status(lake_env)
    assert code == 2 and status["source_rows_in_future"] == 1, status["health"]
    [[before]] = lake_query(settings, "SELECT max(snapshot_id) FROM lake.snapshots()")

    repaired = run_main("--repair", "--json", env=lake_env)
    assert repaired.returncode == 0, repaired.stderr
    run(settings, engine="dlt")  # not due: nothing to load
    code, status = _status(lake_env)
    assert code == 0 and status["source_rows_in_future"] == 1, status["health"]
    assert lake_query(settings, "SELECT count(*) FROM lake.main.events WHERE event_id = ?", [str(moved)]) == [(0,)]
    assert lake_query(settings, f"SELECT count(*) FROM lake.main.events AT (VERSION => {before}) "
                                "WHERE event_id = ?", [str(moved)]) == [(1,)]
    assert_lake_equals_source(settings, 50)

    with source_db(settings) as conn:  # one bad date far ahead: a bad value, no reason for STALE
        conn.execute("INSERT INTO public.events (event_id, event_type, event_timestamp, details) "
                     "VALUES (gen_random_uuid(), 'page_view', '2099-01-01', '{}')")
    code, status = _status(lake_env)
    assert code == 0 and status["source_rows_in_future"] == 1, status["health"]
    assert run(settings, engine="dlt").rows_quarantined == 1
    [(reason,)] = lake_query(settings, "SELECT reason FROM lake.ops.quarantine")
    assert "years ahead" in reason
    assert run(settings, engine="dlt").rows_quarantined == 0  # read again, set aside once
    code, status = _status(lake_env)
    assert code == 0 and status["rows_quarantined"] == 1, status["health"]
    assert_lake_equals_source(settings, 50)


def test_changes_behind_committed_parts_of_a_first_load_keep_status_failing_until_repaired(lake_env,
                                                                                             monkeypatch):
    """A first load in parts; once its second part committed, the application updates, deletes and
    moves rows of the parts committed: what the load's checks saw is kept, --status is FAILING naming
    it after the load ends, and the advised repair leaves lake == source by id and content, HEALTHY."""
    from pipeline.promote import group as group_module

    env = {**lake_env, "BACKFILL_BATCH_ROWS": "100"}
    settings = load_settings(env)
    write_payloads(settings, [("page_view", json.dumps({"n": i})) for i in range(500)], ago=timedelta(hours=3))
    promote, promoted = group_module.promote_together, []

    def promote_then_change(group, members, image=()):
        result = promote(group, members, image)
        promoted.append(result)
        if len(promoted) == 2:
            with source_db(settings) as conn:
                ids = [r[0] for r in conn.execute("SELECT event_id FROM public.events ORDER BY event_timestamp "
                                                  "LIMIT 150").fetchall()]
                conn.execute("UPDATE public.events SET details = '{\"n\": -1}' WHERE event_id = ANY(%s)", [ids[:10]])
                conn.execute("DELETE FROM public.events WHERE event_id = ANY(%s)", [ids[10:15]])
                conn.execute("UPDATE public.events SET event_timestamp = event_timestamp + interval '20 minutes' "
                             "WHERE event_id = ANY(%s)", [ids[15:18]])
        return result

    monkeypatch.setattr(group_module, "promote_together", promote_then_change)
    run(settings, engine="dlt")
    monkeypatch.undo()
    assert len(promoted) >= 3, promoted
    code, status = _status(env)
    assert code == 2, status["health"]
    seen = status["divergences"]
    assert sum(d["extra"] + d["moved"] for d in seen) >= 5 and sum(d["changed"] for d in seen) == 10, seen
    reason = next(r for r in status["health"]["reasons"] if "until repaired" in r)
    repair = reason.split("until repaired: ")[1].split(" replaces")[0].split()
    repaired = run_main(*repair, "--json", env=env)
    assert repaired.returncode == 0, repaired.stderr
    code, status = _status(env)
    assert code == 0 and status["divergences"] == [], status["health"]
    assert_lake_equals_source(settings, 495)


def test_the_advised_repair_reaches_back_past_a_divergence_just_over_whole_hours():
    """Found by the adversary: 48 h and a microsecond behind the watermark was advised as
    --since 48h, which stops a microsecond short: the repair left it kept, and FAILING."""
    from datetime import UTC, datetime

    from pipeline.lake.divergences import Divergence
    from pipeline.ops.status import _unrepaired

    watermark = datetime(2026, 12, 7, 6, tzinfo=UTC)
    seen = Divergence("events", watermark - timedelta(hours=48, microseconds=1), watermark, 0, 1, 0, 0, [],
                      "load's identity check", watermark)
    [reason] = _unrepaired([seen], watermark, watermark)
    assert "since" in reason and " 49h " in reason, reason


def test_a_divergence_past_the_oldest_watermark_of_two_tables_is_cleared_by_the_repair_it_advises(lake_env):
    """Found by the adversary: with two tables, a repair compares every table up to the oldest
    watermark; a divergence kept up to the later table's own watermark was never cleared, though
    lake == source: --status stayed FAILING whatever was run."""
    env = {**lake_env, "SOURCE_TABLES": "public.events,public.clicks"}
    settings = load_settings(env)
    write_payloads(settings, [("page_view", json.dumps({"n": i})) for i in range(100)], ago=timedelta(hours=1))
    write_payloads(settings, [("click", json.dumps({"n": i})) for i in range(50)], ago=timedelta(hours=5),
                   table="public.clicks")
    run(settings, engine="dlt")
    with source_db(settings) as conn:  # behind the look-back of events: moved back three days, one deleted
        [[moved], [deleted]] = conn.execute("SELECT event_id FROM public.events ORDER BY event_timestamp "
                                            "LIMIT 2").fetchall()
        conn.execute("UPDATE public.events SET event_timestamp = event_timestamp - interval '3 days' "
                     "WHERE event_id = %s", [moved])
        conn.execute("DELETE FROM public.events WHERE event_id = %s", [deleted])
    write_payloads(settings, [("page_view", "{}")], ago=timedelta(seconds=1))
    write_payloads(settings, [("click", "{}")], ago=timedelta(minutes=1), table="public.clicks")
    run(settings, engine="dlt")
    code, status = _status(env)
    assert code == 2 and status["divergences"], status["health"]
    reason = next(r for r in status["health"]["reasons"] if "until repaired" in r)
    repair = reason.split("until repaired: ")[1].split(" replaces")[0].split()
    repaired = run_main(*repair, "--json", env=env)
    assert repaired.returncode == 0, repaired.stderr
    code, status = _status(env)
    assert code == 0 and status["divergences"] == [], status["health"]
    assert_lake_equals_source(settings, {"events": 100, "clicks": 51})
