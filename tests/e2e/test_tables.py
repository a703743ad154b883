"""SOURCE_TABLES: several source tables, one image. A writer commits a session and its events in
one transaction while ``--follow`` loads both tables and is SIGKILLed at random moments, and a
third table joins midway: every lake snapshot holds each session with all its events and no event
without its session, and at the end every table equals its source (count, ids, checksum)."""

from __future__ import annotations

import contextlib
import json
import random
import signal
import time
from pathlib import Path

from pipeline import staging
from pipeline.settings import load_settings
from pipeline.settings.resolve import resolve
from tests.conftest import run_cli, run_main
from tests.helpers import Proc, assert_lake_equals_source, lake_query, torn_images

TWO = "public.sessions:started_at:session_id,public.events"
THREE = f"{TWO},public.clicks"
EVENTS_EACH = 3  # generators.events.EVENTS_PER_SESSION


def _images(env: dict[str, str]) -> dict[str, int]:
    """The images committed so far: how many group snapshots, and each table's rows in them."""
    settings = load_settings(env)
    rows = lake_query(settings, f"SELECT commit_extra_info FROM {settings.lake_name}.snapshots() "
                                "WHERE json_extract_string(commit_extra_info, '$.group') IS NOT NULL")
    seen: dict[str, int] = {"images": len(rows)}
    for (info,) in rows:
        for table, staged in json.loads(info)["rows_staged"].items():
            seen[table] = seen.get(table, 0) + staged
    return seen


def _loaded(env: dict[str, str], follower: Proc, more: int = 2, table: str | None = None) -> None:
    """Wait until the follower committed ``more`` images (after one holding ``table``'s rows)."""
    deadline, start = time.monotonic() + 180, None
    while time.monotonic() < deadline:
        assert follower.popen.poll() is None, follower.output[-3000:]
        with contextlib.suppress(Exception):  # the lake may not exist yet
            seen = _images(env)
            if start is None and (table is None or seen.get(table)):
                start = seen["images"]
            if start is not None and seen["images"] >= start + more:
                return
        time.sleep(0.3)
    raise AssertionError(f"no {more} images in 180 s:\n{follower.output[-3000:]}")


def test_every_snapshot_is_one_image_of_linked_tables_through_a_kill_and_a_table_added(lake_env):
    moment = random.Random().uniform(0.0, 1.5)  # when the kill lands: planning, extracting, promoting
    writer = Proc("insert_event_data_loop.py", "--sessions", "public.sessions", "--continuous",
                  "--rows", "25", "--delay", "0.2", env=lake_env)
    clicks = None
    followers: list[Proc] = []
    try:
        writer.wait_for("loop 1: committed", timeout=60)  # both tables exist
        # the killed follower extracts with dlt (no JVM start to wait for), the next one with Spark
        follower = Proc("events_pipeline.py", "--follow", "--every", "1s", "--metrics-port", "0",
                        "--engine", "dlt", env={**lake_env, "SOURCE_TABLES": TWO})
        followers.append(follower)
        _loaded(lake_env, follower)
        time.sleep(moment)
        follower.popen.send_signal(signal.SIGKILL)
        follower.popen.wait(60)
        # a third table joins midway, on the killed follower's staging: its first load does not
        # hold the others back
        clicks = Proc("insert_event_data_loop.py", "--table", "public.clicks", "--continuous",
                      "--rows", "30", "--delay", "0.3", env=lake_env)
        clicks.wait_for("loop 1: committed", timeout=60)
        follower = Proc("events_pipeline.py", "--follow", "--every", "1s", "--metrics-port", "0",
                        env={**lake_env, "SOURCE_TABLES": THREE})
        followers.append(follower)
        _loaded(lake_env, follower, table="clicks")
    finally:
        for proc in [writer, *([clicks] if clicks else []), *followers]:
            if proc.popen.poll() is None:
                proc.terminate()
    # the rest with the other engine: one image does not depend on Spark
    caught_up = run_main("--run", "--engine", "dlt", env={**lake_env, "SOURCE_TABLES": THREE})
    assert caught_up.returncode == 0, caught_up.stdout + caught_up.stderr
    assert torn_images(lake_env) == [], f"kill {moment:.2f}s after a load"
    settings = resolve(load_settings({**lake_env, "SOURCE_TABLES": THREE}))
    assert_lake_equals_source(settings)


def test_a_group_torn_by_a_kill_between_its_tables_is_read_again_whole(lake_env):
    """SIGKILL once the first table's batch is staged: the group never completed, so its staged
    batch is dropped by the next run (promoting it alone would tear the image) and read again."""
    # events first: its batch is staged zero-copy (Spark's files in the lake's folder) before the kill;
    # the sessions table, with its own columns, is promoted by copy
    env = {**lake_env, "SOURCE_TABLES": "public.events,public.sessions:started_at:session_id"}
    written = run_cli("insert_event_data_loop.py", "--sessions", "public.sessions", "--rows", "40",
                      "--quiet", env=lake_env)
    assert written.returncode == 0, written.stdout + written.stderr
    crashed = run_cli("tests/faulty_cli.py", "--run", env={**env, "EVENT_LAKE_TEST_FAULT": "after-stage"})
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr
    settings = resolve(load_settings(env))
    staged = {t.name: staging.complete_batches(staging.table_dir(settings, t)) for t in settings.tables}
    assert [len(batches) for batches in staged.values()] == [1, 0], staged  # events staged, sessions not
    assert staged["events"][0].lake_files  # zero-copy: Spark wrote its files into the lake's folder
    rerun = run_main("--run", "--engine", "dlt", env=env)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "its group" in rerun.stderr and "reads those rows again" in rerun.stderr
    assert torn_images(lake_env) == []
    assert_lake_equals_source(settings, expected_rows={"events": 40 * EVENTS_EACH, "sessions": 40})
    # the dropped batch's files went with it: every Parquet file under the table is the lake's
    registered = {uri for (uri,) in lake_query(settings, "SELECT data_file FROM ducklake_list_files(?, ?)",
                                               [settings.lake_name, "events"])}
    on_disk = {str(p) for p in (Path(settings.data_path) / "main" / "events").rglob("*.parquet")}
    assert on_disk == registered
