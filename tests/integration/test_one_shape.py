"""One shape for any number of tables: after the settings are read nothing tells SOURCE_TABLE=a
from SOURCE_TABLES=a (reports, JSON, commits and status alike), and every per-table operation
takes its range from the table's own state: a plain --repair reaches a change anywhere in any
table's loaded range, whatever the other tables' watermarks (real Postgres, a real DuckLake)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from generators.events import EventFactory
from generators.writer import add_events as add_events_to
from generators.writer import add_sessions, write_batch
from pipeline.ops.pipeline import Pipeline
from pipeline.settings import load_settings
from pipeline.settings.resolve import resolve
from pipeline.source.connect import connect
from tests.conftest import run_main
from tests.helpers import assert_lake_equals_source, lake_query, run

SESSIONS = "public.sessions:started_at:session_id"


def _plain(value: object, env: dict[str, str]) -> object:
    """A document with what differs between two lakes by construction taken out: their databases'
    and folders' names, batch and group ids, instants and durations."""
    if isinstance(value, dict):
        # transaction ids and the source table's storage: each database's own
        return {key: "<xid>" if key.endswith(("xmin", "filenode")) else _plain(item, env)
                for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item, env) for item in value]
    if isinstance(value, float):
        return "<number>"
    if isinstance(value, str):
        for name in ("DUCKLAKE_CATALOG", "SOURCE_PG_DSN", "DUCKLAKE_DATA_PATH", "STAGING_PATH", "EVENT_LAKE_HOME"):
            value = value.replace(env[name].rstrip("/"), f"<{name}>")
        value = re.sub(r"el_test_\w+|dbname=\S+|/[\w/.-]*pytest[\w/.-]*", "<where>", value)
        value = re.sub(r"\b\d{8}T\d+Z-[0-9a-f]+\b", "<batch>", value)  # batch and group ids
        value = re.sub(r"\d{4}-\d\d-\d\d[T ][\d:.]+(\+00:00|Z)?", "<instant>", value)
        value = re.sub(r"-?\b\d+(\.\d+)?s\b", "<seconds>", value)
        return re.sub(r"\b[0-9a-f]{16,32}\b", "<id>", value)
    return value


def _session(env: dict[str, str], t0: datetime) -> dict[str, object]:
    """The same user session on a lake: a load, late rows, a source change repaired, the status."""
    settings = load_settings(env)
    dsn = resolve(settings).source_dsn
    add_events_to(dsn, "public.events", 40, seed=1, now=t0)
    first = run_main("--run", "--engine", "dlt", "--json", env=env)
    add_events_to(dsn, "public.events", 10, seed=2, now=t0 + timedelta(minutes=20))
    second = run_main("--run", "--engine", "dlt", "--json", env=env)
    with connect(dsn) as conn:
        conn.execute("DELETE FROM public.events WHERE event_id = (SELECT event_id FROM public.events "
                     "WHERE event_timestamp > now() - interval '12 minutes' ORDER BY event_id::text LIMIT 1)")
        conn.execute("UPDATE public.events SET details = '{\"changed\": true}' "
                     "WHERE event_id = (SELECT event_id FROM public.events "
                     "WHERE event_timestamp > now() - interval '12 minutes' ORDER BY event_id::text DESC LIMIT 1)")
    failing = run_main("--status", "--json", env=env)
    repaired = run_main("--repair", "--json", env=env)
    reconciled = run_main("--reconcile", "--since", "1d", "--json", env=env)
    status = run_main("--status", "--json", env=env)
    outputs = [first, second, failing, repaired, reconciled, status]
    assert [o.returncode for o in outputs] == [0, 0, 2, 0, 0, 0], [o.stderr[-2000:] for o in outputs]
    commits = lake_query(settings, "SELECT snapshot_id, commit_message, commit_extra_info FROM lake.snapshots() "
                                   "ORDER BY snapshot_id")
    return _plain({"documents": [json.loads(o.stdout) for o in outputs],
                   "text": run_main("--status", env=env).stdout,
                   "commits": [[s, m, json.loads(i) if i else None] for s, m, i in commits]}, env)


def test_source_table_and_source_tables_of_one_table_are_the_same_pipeline(new_lake_env):
    alone, listed = new_lake_env("alone"), new_lake_env("listed")
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    one = _session({**alone, "SOURCE_TABLE": "public.events"}, t0)
    other = _session({**listed, "SOURCE_TABLES": "public.events"}, t0)
    assert one["documents"][0]["tables"].keys() == {"events"}  # the one table's part, named
    for part in one:
        if one[part] != other[part]:
            import difflib
            diff = difflib.unified_diff(json.dumps(one[part], indent=1, sort_keys=True).splitlines(),
                                        json.dumps(other[part], indent=1, sort_keys=True).splitlines(), lineterm="")
            raise AssertionError(part + "\n" + "\n".join(diff))


def _moves_on(dsn, table: str, rows: int, seed: int, now: datetime) -> None:
    with connect(dsn, autocommit=False) as conn:
        write_batch(conn, table, EventFactory(seed).batch(rows, now))


@pytest.mark.parametrize("tables", [2, 3])
def test_a_plain_repair_reaches_a_change_in_any_tables_own_range(lake_env, tables):
    """The tables' watermarks differ (sessions' 20 minutes behind events'): a row deleted and one
    changed in the source after events' own later rows were loaded — past sessions' watermark,
    inside events' (and clicks') own range. A plain --repair compares each table up to its own
    watermark: verify equal and status HEALTHY for every table (it repaired up to the image's
    oldest watermark and said "nothing to repair")."""
    listed = [SESSIONS, "public.events", *(["public.clicks"] if tables == 3 else [])]
    env = {**lake_env, "SOURCE_TABLES": ",".join(listed)}
    settings = resolve(load_settings(env))
    dsn, now = settings.source_dsn, datetime.now(UTC)
    add_sessions(dsn, "public.sessions", "public.events", 5, seed=11, now=now - timedelta(minutes=25))
    if tables == 3:
        add_events_to(dsn, "public.clicks", 10, seed=12, now=now - timedelta(minutes=25))
    run(settings, engine="dlt")
    _moves_on(dsn, "public.events", 6, seed=13, now=now - timedelta(minutes=2))  # events' watermark moves on
    if tables == 3:
        _moves_on(dsn, "public.clicks", 6, seed=14, now=now - timedelta(minutes=8))  # clicks' less so
    run(settings, engine="dlt")
    marks = dict(lake_query(settings, "SELECT table_name, max(max_event_timestamp) FROM lake.ops.batches GROUP BY 1"))
    assert marks["sessions"] < marks["events"], marks
    changed = ["public.events", *(["public.clicks"] if tables == 3 else [])]
    with connect(dsn) as conn:  # in each table, past the sessions' watermark: a row gone, one changed
        for table in changed:
            [(gone,), (edited,)] = conn.execute(
                f"SELECT event_id FROM {table} WHERE event_timestamp > now() - interval '10 minutes' "
                "ORDER BY event_timestamp DESC, event_id LIMIT 2").fetchall()
            conn.execute(f"DELETE FROM {table} WHERE event_id = %s", [gone])
            conn.execute(f"UPDATE {table} SET details = '{{\"edited\": 1}}' WHERE event_id = %s", [edited])
    with Pipeline(settings) as pipeline:
        assert pipeline.status().health.state == "failing"
        report = pipeline.repair(None)
        names = [table.split(".")[1] for table in changed]
        assert {name: report.tables[name].rows_removed for name in names} == dict.fromkeys(names, 2), \
            report.summary()
        assert pipeline.verify().equal
        status = pipeline.status()
    assert status.health.state == "healthy", status.health.reasons
    assert all(table.health.state == "healthy" for table in status.tables.values()), status.tables
    assert_lake_equals_source(settings)
