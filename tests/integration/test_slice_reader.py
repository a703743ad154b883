"""The arrow reader's slice task, run in this process against the real source (what a Spark task
runs on an executor): it imports the planner's exported snapshot, so rows committed after the
plan never reach the batch, and it writes the lake's own Parquet types."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.extract import spark_arrow
from pipeline.extract.batch import ExtractRequest
from pipeline.extract.slice_task import SliceSource
from pipeline.extract.task_reports import RowsListener
from pipeline.settings.resolve import resolve
from pipeline.source import stats
from pipeline.source.plan import BatchPlan
from pipeline.source.shape import SourceRelation
from pipeline.source.snapshot import exported_snapshot
from pipeline.source.window import Window
from pipeline.storage.folder import folder_of
from tests.helpers import add_events, only_table, source_table


def _until(condition, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "no task report arrived"
        time.sleep(0.05)


def _slice_rows(source: SliceSource, table: str) -> int:
    return sum(batch.num_rows for batch in source.batches(f"SELECT event_id FROM {table}"))


def test_each_slice_reads_the_planners_snapshot_not_rows_committed_after_the_plan(settings):
    """The probe's trap: a snapshot set outside an explicit transaction silently reads live data.
    Rows committed between the plan and the read stay out of every slice; without the snapshot
    the same query sees them (so this test can tell the two apart)."""
    settings = resolve(settings)
    add_events(settings, 400, seed=101)
    with exported_snapshot(settings.source_dsn) as snapshot:
        conn, snapshot_id = snapshot.conn, snapshot.snapshot_id
        source = SourceRelation.of(conn, only_table(settings))
        planned = stats.window_stats(conn, source, Window(None, stats.server_now(conn))).rows
        add_events(settings, 250, seed=102)  # commits while the plan's transaction is open
        pinned = SliceSource(settings.source_dsn.conninfo(), snapshot_id, "UTC")
        live = SliceSource(settings.source_dsn.conninfo(), None, "UTC")
        assert planned == 400
        assert _slice_rows(pinned, source_table(settings)) == 400
        assert _slice_rows(live, source_table(settings)) == 650


def test_slice_tasks_split_a_window_by_pages_or_time_and_stage_every_row_once(settings, tmp_path):
    """Run the pickled job's slices in-process: page-range slices of a first load and time
    slices of a later window each stage the rows the planner counted, no row twice."""
    settings = resolve(settings)
    add_events(settings, 3_000, seed=103)
    with exported_snapshot(settings.source_dsn) as snapshot:
        conn, snapshot_id = snapshot.conn, snapshot.snapshot_id
        conn.execute(f"ANALYZE {source_table(settings)}")  # the page count and row estimate the planner reads
        upper, source = stats.server_now(conn), SourceRelation.of(conn, only_table(settings))
        for name, window in (("pages", Window(None, upper)),
                             ("times", Window(datetime(2000, 1, 1, tzinfo=UTC), upper))):
            window_stats = stats.window_stats(conn, source, window)
            if name == "times":  # as for a small incremental window: by time, over the index
                window_stats = dataclasses.replace(window_stats, table_pages=0)
            request = ExtractRequest(settings, only_table(settings), BatchPlan(source, window, window_stats, snapshot_id, "UTC"),
                                     f"b-{name}")
            parts = spark_arrow.slices(request, 4)
            if name == "pages":
                assert window_stats.table_pages >= 4 and all(p is not None for _, p in parts), parts
            else:
                assert all(p is None for _, p in parts) and len(parts) > 1, parts
            folder = folder_of(str(tmp_path / name), settings.storage)
            with RowsListener() as listener:  # a progress line's end: each slice reports its rows
                job = spark_arrow.job(request, parts, folder, listener.address)
                counts = [row for batch in job(iter([pa.record_batch({"id": list(range(len(parts)))})]))
                          for row in batch.to_pylist()]
                assert sum(c["rows"] for c in counts) == 3_000, (name, counts)
                _until(lambda: listener.rows == 3_000)
            staged = pq.read_table(tmp_path / name)
            assert staged.num_rows == 3_000 and len(set(staged.column("event_id").to_pylist())) == 3_000
