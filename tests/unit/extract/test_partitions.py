"""How a window is split for Spark (pipeline/extract/partitions.py), pure: slice counts, time chunks, page ranges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipeline.extract.partitions import page_predicate, page_ranges, plan_partitions, time_chunks
from pipeline.source.window import Window

T = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("rows", "cores", "expected"), [
    (0, 2, 1), (10_000, 2, 1), (60_000, 2, 2), (1_000_000, 2, 2), (2_000_000, 2, 4), (100_000_000, 2, 8), (1_000_000, 16, 16)])
def test_partitions_follow_rows_and_cores(rows, cores, expected):
    assert plan_partitions(rows, cores) == expected


def test_time_chunks_cover_the_window_exactly_once():

    window = Window(low=T - timedelta(hours=2), upper=T)
    first, last = T - timedelta(hours=1, minutes=59), T - timedelta(seconds=1)
    chunks = time_chunks(window, 1_000, first, last, rows_per_chunk=300)
    assert len(chunks) == 4
    assert chunks[0].low == window.low and chunks[-1].upper == window.upper
    assert all(a.upper == b.low for a, b in zip(chunks, chunks[1:], strict=False))
    assert all(c.low < c.upper for c in chunks)
    assert [c.nulls for c in chunks] == [True, False, False, False]  # NULL timestamps read once
    assert time_chunks(window, 100, first, last, rows_per_chunk=300) == [window]
    assert time_chunks(Window(None, T), 900, first, last, rows_per_chunk=300)[0].low is None


def test_a_window_holding_much_of_the_table_is_read_in_page_ranges_that_cover_every_page():
    ranges = page_ranges(window_rows=900, table_rows=1_000, table_pages=100, count=4)
    assert ranges == [(0, 25), (25, 50), (50, 75), (75, None)]  # the last open: pages added since
    assert page_ranges(900, 1_000, 10, 3) == [(0, 4), (4, 8), (8, None)]
    assert page_ranges(100, 1_000, 100, 4) == []  # a small window: time slices over the index
    assert page_ranges(100, 0, 100, 4, whole=True) == [(0, 25), (25, 50), (50, 75), (75, None)]  # not analyzed
    assert page_ranges(900, 1_000, 100, 1) == [] and page_ranges(0, 0, 0, 4, whole=True) == []
    assert page_predicate((25, 50)) == "ctid >= '(25,0)'::tid AND ctid < '(50,0)'::tid"
    assert page_predicate((75, None)) == "ctid >= '(75,0)'::tid"

