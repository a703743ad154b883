"""SOURCE_TABLES' hand-over through staging: a group extracted by one process and promoted by
another lands in one commit; a group still being extracted is left alone; one that lost a
table's batch for good is dropped and read again, never promoted in part."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import replace
from datetime import UTC, datetime

from generators.events import EventFactory
from generators.writer import write_linked
from pipeline import staging
from pipeline.settings.model import SourceTable
from pipeline.settings.resolve import resolve
from pipeline.source.connect import connect
from pipeline.source.ddl import ensure_table
from tests.helpers import assert_lake_equals_source, lake_query, run

SESSIONS, EVENTS = SourceTable("public.sessions"), SourceTable("public.events")


def _linked(settings, sessions: int, seed: int) -> None:
    with connect(settings.source_dsn, autocommit=False) as conn:
        for table in (SESSIONS, EVENTS):
            ensure_table(conn, table.qualified)
        conn.commit()
        made, events = EventFactory(seed).sessions(sessions, datetime.now(UTC))
        write_linked(conn, [(SESSIONS.qualified, made), (EVENTS.qualified, events)])


def _staged(settings) -> dict[str, list[staging.StagedBatch]]:
    return {t.name: staging.complete_batches(staging.table_dir(settings.for_table(t))) for t in settings.tables}


def test_a_group_staged_by_one_run_is_promoted_by_another_in_one_commit(settings):
    both = resolve(replace(settings, source_tables=(SESSIONS, EVENTS)))
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
    assert _staged(both) == {"sessions": [], "events": []}
    for table in both.tables:
        assert_lake_equals_source(both.for_table(table))


def test_a_group_missing_a_batch_waits_for_its_live_process_then_is_dropped_and_read_again(settings):
    both = resolve(replace(settings, source_tables=(SESSIONS, EVENTS)))
    _linked(both, 20, seed=2)
    run(both, "extract", engine="dlt")
    staged = _staged(both)
    group = staged["sessions"][0].manifest.group
    staging.remove_batch(staged["events"][0].folder)  # as if its extraction had not finished
    # the group's process still runs (its claim names a live process of this host: this one)
    sessions_dir = staging.table_dir(both.for_table(SESSIONS))
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
    for table in both.tables:
        assert_lake_equals_source(both.for_table(table))
