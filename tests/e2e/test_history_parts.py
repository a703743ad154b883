"""A first load reads a history in parts of BACKFILL_BATCH_ROWS rows, each committed as a snapshot
of its own with its proof: killed (the whole process group) after some parts, it loses at most the
part in flight, --status from another process says how far it is, and the rerun reads only what was
not committed (issue 54)."""

from __future__ import annotations

import json
import signal

from pipeline.settings.resolve import resolve
from pipeline.source.connect import connect
from pipeline.source.ddl import ensure_table
from tests.conftest import load_settings, run_cli
from tests.helpers import Proc, assert_lake_equals_source, lake_query

ROWS, PART = 8_000, 1_000
LOOKBACK_ROWS = 15  # a row a minute: the look-back each part reads again behind the last one


def _history(settings) -> None:
    """A history of ROWS events, one a minute back from an hour ago."""
    with connect(settings.source_dsn) as conn:
        ensure_table(conn, "public.events")
        conn.execute("INSERT INTO public.events (event_id, event_type, event_timestamp, details) "
                     "SELECT gen_random_uuid(), 'view', now() - interval '1 hour' - make_interval(mins => i), "
                     f"jsonb_build_object('i', i) FROM generate_series(1, {ROWS}) i")


def test_a_first_load_killed_after_two_parts_resumes_after_the_last_committed_part(lake_env):
    env = {**lake_env, "BACKFILL_BATCH_ROWS": str(PART), "LOOKBACK": "15m"}
    settings = resolve(load_settings(env))
    _history(settings)
    proc = Proc("events_pipeline.py", "--run", "--engine", "dlt", env=env, as_users_start_it=True)
    try:
        proc.wait_for("reading history: part 2 ", timeout=300)
    finally:
        proc.signal_group(signal.SIGKILL)
        proc.popen.wait(30)
    [(held,)] = lake_query(settings, f"SELECT count(*) FROM {settings.lake_name}.main.events")
    assert PART * 2 <= held < ROWS, held  # whole parts, each committed
    # how far it is, from another process
    status = run_cli("events_pipeline.py", "--status", "--json", env=env)
    history = json.loads(status.stdout)["history"]
    assert history["rows_loaded"] == held and history["rows_total"] == ROWS, history
    assert history["eta_seconds"] is None or history["eta_seconds"] > 0, history
    text = run_cli("events_pipeline.py", "--status", env=env).stdout
    assert f"% of its history ({held:,} of {ROWS:,} rows)" in text, text
    # the rerun goes on after the last committed part: at most what was not committed, plus the
    # look-back behind each part (and one part's worth of slack for the one in flight)
    rerun = run_cli("events_pipeline.py", "--run", "--engine", "dlt", "--json", env=env)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    document = json.loads(rerun.stdout)
    parts = document["parts"]
    assert document["rows_inserted"] == ROWS - held, document
    assert document["rows_read"] <= ROWS - held + PART + LOOKBACK_ROWS * len(parts), document
    assert len(parts) >= (ROWS - held) // PART and all(len(p["snapshots"]) == 1 for p in parts[:-1]), parts
    assert "history read: part" in rerun.stderr and "rows/s" in rerun.stderr, rerun.stderr[-2000:]
    assert json.loads(run_cli("events_pipeline.py", "--status", "--json", env=env).stdout)["history"] is None
    assert_lake_equals_source(settings, expected_rows=ROWS)


def test_load_timeout_bounds_each_part_not_the_whole_history(lake_env):
    """LOAD_TIMEOUT bounds one extraction: a history whose parts' reads together take longer than
    it (each part's one slice sleeps 8 s in Postgres first: four parts, at least 32 s) loads whole,
    because no part takes that long (each has 22 s to spare: on the busy suite a part of 2 s against
    10 s of LOAD_TIMEOUT once ran past it)."""
    from tests import faults

    rows, part, timeout = 400, 100, 30
    env = {**lake_env, "BACKFILL_BATCH_ROWS": str(part), "LOAD_TIMEOUT": f"{timeout}s", "SPARK_PARTITIONS": "1",
           faults.ENV: "slow-read", faults.SLOW_ENV: "8"}
    settings = resolve(load_settings(env))
    with connect(settings.source_dsn) as conn:
        ensure_table(conn, "public.events")
        conn.execute("INSERT INTO public.events (event_id, event_type, event_timestamp) SELECT gen_random_uuid(), "
                     f"'view', now() - interval '1 hour' - make_interval(mins => i) FROM generate_series(1, {rows}) i")
    result = run_cli("tests/faulty_cli.py", "--run", "--engine", "spark", "--json", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    assert document["rows_inserted"] == rows and len(document["parts"]) >= rows // part, document
    assert document["seconds"]["extract"] > timeout, document["seconds"]  # longer than LOAD_TIMEOUT in all
    assert_lake_equals_source(settings, expected_rows=rows)
