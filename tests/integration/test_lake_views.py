"""The lake's views. Known since (``lake.known.<table>``): every row's first snapshot and its time beside
the row's own event time — for a late event, and kept through what rewrites rows (a payload key typed
later fills every row; an erasure rewrites every file that held the subject, inlined rows included) and
through maintenance expiring the snapshots themselves. A view per event type
(``lake.<table>_by_type.<type>``) with its keys as columns, which only ever gains columns."""

from __future__ import annotations

import json
from datetime import timedelta

from pipeline.ops.pipeline import Pipeline
from pipeline.settings import load_settings
from tests.conftest import run_main
from tests.helpers import lake_query, run, write_payloads

SUBJECT = "u3"


def _users(rows: int, *, ago: timedelta, settings) -> None:
    write_payloads(settings, [("page_view", json.dumps({"user_id": f"u{i % 7}", "n": i})) for i in range(rows)],
                   ago=ago)


def test_known_since_of_a_late_event_survives_typing_erasure_and_expiry(lake_env):
    env = {**lake_env, "TYPED_KEYS": "none", "SUBJECT_KEY": "details.user_id",
           "ERASURE_KEY": "a key the tests keep"}
    settings = load_settings(env)
    _users(200, ago=timedelta(hours=3), settings=settings)
    run(settings)  # zero-copy: Spark's files
    _users(90, ago=timedelta(hours=2), settings=settings)
    run(settings, engine="dlt")  # copy promotion
    _users(4, ago=timedelta(minutes=20), settings=settings)
    run(settings, engine="dlt")  # a few rows: DuckLake keeps them inlined in the catalog
    write_payloads(settings, [("late", json.dumps({"user_id": "u9"}))] * 2, ago=timedelta(hours=6))
    late = run(settings)  # dated six hours back, arriving now: a late event
    assert late.rows_inserted == 2, late

    first = dict(lake_query(settings, "SELECT event_id, snapshot_id FROM lake.main.events"))
    loads = dict(lake_query(settings, "SELECT snapshot_id, snapshot_time FROM lake.snapshots()"))
    assert len(set(first.values())) == 4  # one snapshot per load

    # what rewrites rows: an erasure (every file holding u3 rewritten, its inlined rows flushed), a key
    # typed then (every row filled), maintenance expiring every snapshot but the last
    with Pipeline(settings) as pipeline:
        erased = pipeline.erase(SUBJECT)
    assert erased.rows == sum(len(range(3, rows, 7)) for rows in (200, 90, 4)), erased.as_dict()
    typed = load_settings({**env, "TYPED_KEYS": "user_id"})
    run(typed)
    maintained = run_main("--maintain", "--retention", "0s", "--json", env={**env, "TYPED_KEYS": "user_id"})
    assert maintained.returncode == 0, maintained.stderr

    moved = lake_query(typed, "SELECT count(*) FROM lake.main.events WHERE snapshot_id NOT IN "
                              f"({', '.join(str(s) for s in loads)})")[0][0]
    assert moved == len(first) - erased.rows  # the attack bites: every row's own snapshot is a rewrite's
    assert not set(loads) & {s for (s,) in lake_query(typed, "SELECT snapshot_id FROM lake.snapshots()")}

    known = lake_query(typed, "SELECT event_id, known_snapshot, known_since, lateness, event_type "
                              "FROM lake.known.events")
    assert len(known) == len(first) - erased.rows
    assert {row[0] for row in known} <= set(first)
    for event_id, snapshot, since, lateness, kind in known:
        assert snapshot == first[event_id], event_id  # its first snapshot, whatever rewrote it
        # the snapshot expired: its time is the load's, as ops.batches recorded it in that commit
        assert abs((since - loads[snapshot]).total_seconds()) < 5, (since, loads[snapshot])
        assert (lateness > timedelta(hours=6)) == (kind == "late"), (kind, lateness)

    # lateness per event type, as the analysis page asks it, through the project's SQL session
    with Pipeline(typed) as pipeline:
        per_type = pipeline.sql("SELECT event_type, max(epoch(lateness)) AS worst_seconds FROM lake.known.events "
                                "GROUP BY event_type ORDER BY worst_seconds DESC").to_pylist()
    assert per_type[0]["event_type"] == "late" and per_type[0]["worst_seconds"] > 6 * 3600
    assert per_type[1]["worst_seconds"] < 4 * 3600


def test_a_lake_made_before_known_since_gets_its_column_and_view_on_the_next_load(lake_env):
    from pipeline.lake.connect import lake_session
    from pipeline.settings.resolve import resolve

    settings = load_settings({**lake_env, "TYPED_KEYS": "none"})
    _users(30, ago=timedelta(hours=1), settings=settings)
    run(settings)
    with lake_session(resolve(settings)) as con:  # as an older version made it: neither exists
        con.execute("DROP VIEW lake.known.events")
        con.execute("ALTER TABLE lake.main.events DROP COLUMN _el_known_snapshot")
    _users(5, ago=timedelta(minutes=5), settings=settings)
    assert run(settings, engine="dlt").rows_inserted == 5
    known = lake_query(settings, "SELECT k.known_snapshot = e.snapshot_id, count(*) FROM lake.known.events k "
                                 "JOIN lake.main.events e USING (event_id) GROUP BY ALL")
    assert known == [(True, 35)]
    [[latest]] = lake_query(settings, "SELECT max(snapshot_id) FROM lake.snapshots()")
    with Pipeline(settings) as pipeline:  # the analysis page's questions bind, unqualified as it writes them
        per_type = pipeline.sql("SELECT event_type, count(*) AS events, round(quantile_cont(epoch(lateness), 0.95), 1) "
                                "AS p95_seconds FROM known.events WHERE event_timestamp > now() - INTERVAL 1 DAY "
                                "GROUP BY ALL").to_pylist()
        feed = pipeline.sql(f"SELECT c.change_type, k.lateness FROM table_changes('events', {latest}, {latest}) c "
                            "LEFT JOIN known.events k USING (event_id) WHERE k.lateness IS NOT NULL").num_rows
    assert per_type[0]["events"] == 35 and feed == 5


def _view_columns(settings) -> dict[str, list[str]]:
    return dict(lake_query(settings, "SELECT table_name, list(column_name ORDER BY column_index) FROM "
                                     "duckdb_columns() WHERE schema_name = 'events_by_type' GROUP BY ALL"))


def test_a_view_per_event_type_has_its_keys_as_columns_and_only_ever_gains_columns(lake_env):
    """Types with different keys, a key typed as a column, a key in few rows, a type named as another but
    for case, a key named as a base column; a later load adds a key and a type, drops one from the rows."""
    settings = load_settings({**lake_env, "TYPED_KEYS": "user_id"})
    rows = [("purchase", {"user_id": f"u{i}", "amount": i, "currency": "EUR"}) for i in range(20)]
    rows += [("page_view", {"user_id": f"u{i}", "url": f"/p{i}"}) for i in range(40)]
    rows += [("page_view", {"user_id": "u1", "url": "/rare", "rare": 1})]  # 1 of 41: not a column
    rows += [("Page_View", {"other": 1}), ("signup", {"event_id": "x", "email": "a@b"})]
    write_payloads(settings, [(kind, json.dumps(d)) for kind, d in rows], ago=timedelta(minutes=30))
    run(settings)  # the table is made with its views, from a sample of the source
    assert lake_query(settings, "SELECT count(*) FROM lake.snapshots() WHERE commit_message LIKE 'views%'") == [(0,)]
    columns = _view_columns(settings)
    # keys by share, then name; page_view's "rare" (1 of 41) stays in details; Page_View names page_view's view
    assert columns == {"page_view": ["event_id", "event_timestamp", "created_at", "url", "user_id", "details"],
                       "purchase": ["event_id", "event_timestamp", "created_at", "amount", "currency", "user_id",
                                    "details"],
                       "signup": ["event_id", "event_timestamp", "created_at", "email", "details"]}, columns
    assert lake_query(settings, "SELECT user_id, amount, currency FROM lake.events_by_type.purchase "
                                "WHERE user_id = 'u7'") == [("u7", "7", "EUR")]
    assert lake_query(settings, "SELECT count(*) FROM lake.events_by_type.page_view") == [(41,)]

    write_payloads(settings, [("purchase", json.dumps({"user_id": "u1", "coupon": c})) for c in "XYZ"]
                   + [("refund", json.dumps({"amount": 3}))], ago=timedelta(minutes=5))
    run(settings)
    [[load_snapshot]] = lake_query(settings, "SELECT max(snapshot_id) FROM lake.ops.batches")
    assert lake_query(settings, "SELECT max(snapshot_id) FROM lake.snapshots()") == [(load_snapshot,)]  # last
    assert "coupon" not in _view_columns(settings)["purchase"]  # what the lake held when the load began
    run(settings)  # the next load begins by widening them
    columns = _view_columns(settings)
    assert columns["purchase"][3:] == ["amount", "currency", "user_id", "coupon", "details"]  # kept, and gained
    assert columns["refund"][3:] == ["amount", "details"]
    with Pipeline(settings) as pipeline:  # through the project's session, unqualified
        assert pipeline.sql("SELECT coupon FROM events_by_type.purchase WHERE coupon IS NOT NULL ORDER BY 1") \
            .column(0).to_pylist() == ["X", "Y", "Z"]


def test_views_by_type_survive_hostile_keys_and_types_and_are_not_remade_when_nothing_changed(lake_env):
    """Found by an adversary: an empty key failed the table's first commit for good; a key named as a
    table column (event_type) was dropped from its view and the view remade on every run; a type whose
    name differs in case took over the view of another when the other's key was its name; a type with
    more keys than a view holds was "widened" to the same view on every run."""
    settings = load_settings({**lake_env, "TYPED_KEYS": "none"})
    wide = {f"k{i:02}": i for i in range(70)}
    rows = [("click", {"user_id": "u", "": "blank", "event_type": "nested"})] * 30
    rows += [("Purchase", {"purchase": "p"})] * 60 + [("wide", wide)] * 10
    write_payloads(settings, [(kind, json.dumps(d)) for kind, d in rows], ago=timedelta(minutes=50))
    assert run(settings, engine="dlt").rows_inserted == 100
    write_payloads(settings, [("purchase", json.dumps({"zzz": "z"}))] * 100, ago=timedelta(minutes=10))
    assert run(settings, engine="dlt").rows_inserted == 100
    run(settings, engine="dlt")
    views_commits = lake_query(settings, "SELECT count(*) FROM lake.snapshots() WHERE commit_message LIKE 'views%'")
    run(settings, engine="dlt")  # nothing new: no views commit
    assert lake_query(settings, "SELECT count(*) FROM lake.snapshots() WHERE commit_message LIKE 'views%'") \
        == views_commits
    columns = _view_columns(settings)
    assert columns["click"][3:] == ["event_type", "user_id", "details"]  # the empty key stays in details
    assert len(columns["wide"]) == 3 + 64 + 1
    assert lake_query(settings, "SELECT count(*), min(purchase) FROM lake.events_by_type.purchase") == [(60, "p")]
    assert lake_query(settings, "SELECT count(*) FROM lake.events_by_type.click WHERE event_type = 'nested'") \
        == [(30,)]


def test_a_table_whose_own_columns_hide_the_row_snapshot_loads_without_a_known_view(settings):
    from dataclasses import replace

    from pipeline.settings import TableSpec
    from pipeline.settings.resolve import resolve
    from tests.helpers import source_db

    with source_db(settings) as conn:
        conn.execute("CREATE TABLE public.sessions (session_id bigint PRIMARY KEY, started_at timestamptz NOT NULL, "
                     "snapshot_id bigint, lateness text, created_at timestamptz DEFAULT now())")
        conn.execute("INSERT INTO public.sessions SELECT i, now() - interval '5 minutes', 424242, 'mine' "
                     "FROM generate_series(1, 20) i")
    sessions = resolve(replace(settings, tables=(TableSpec("public.sessions", "started_at", "session_id"),)))
    assert run(sessions, engine="dlt").rows_inserted == 20
    assert lake_query(sessions, "SELECT count(*) FROM duckdb_views() WHERE schema_name = 'known'") == [(0,)]
    assert lake_query(sessions, f"SELECT sum(snapshot_id), count(_el_known_snapshot) FROM "
                                f"{sessions.lake_name}.main.sessions") == [(424242 * 20, 0)]
