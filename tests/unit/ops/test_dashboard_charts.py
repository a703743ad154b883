"""Dashboard charts drawn from series (pure SVG)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from pipeline.ops.dashboard import chart


def test_a_chart_without_points_says_so_and_one_point_sits_in_the_middle():
    assert 'data-points="0"' in chart([], "rows", "bars") and "no data yet" in chart([], "rows", "bars")
    one = chart([(datetime(2026, 11, 22, tzinfo=UTC), 5.0)], "rows", "bars")
    assert one.count('class="bar"') == 1
    many = chart([(datetime(2026, 11, 22, tzinfo=UTC) + timedelta(minutes=i), i) for i in range(100)], "s", "line")
    assert 'data-points="100"' in many and "<circle" not in many  # a dense line has no markers


def test_charts_have_whole_ticks_four_time_labels_a_unit_title_and_marked_reconcile_bars():
    from pipeline.ops.dashboard import kept_series, nice_ticks

    t0 = datetime(2026, 11, 22, tzinfo=UTC)
    points = [(t0 + timedelta(minutes=i), v) for i, v in enumerate((1, 3, 2))]
    svg = chart(points, "files", "bars", marked=[False, True, False],
                span=(t0 - timedelta(minutes=30), t0 + timedelta(minutes=30)))
    ticks = re.findall(r'<text class="tick"[^>]*>([^<]+)</text>', svg)
    assert ticks == ["0", "1", "2", "3", "4"]  # counts: no 1.5 files
    # round times across the shared span, the date where it starts and where it changes
    times = re.findall(r'<text class="time"[^>]*>([^<]+)</text>', svg)
    assert times == ["11-21 23:30", "23:45", "11-22 00:00", "00:15", "00:30 UTC"]
    assert '<text class="unit" transform="rotate(-90)"' in svg and ">files</text>" in svg
    assert svg.count('class="bar marked"') == 1 and svg.count('class="bar"') == 2
    assert nice_ticks(650, whole=True) == [0, 200, 400, 600, 800]
    # snapshots kept drops when an expiry removes snapshots (they are gone from the catalog;
    # the job history says when and which)
    snapshots = [{"snapshot_time": t0 + timedelta(minutes=10 * i), "snapshot_id": i} for i in range(5, 9)]
    expired = [{"finished_at": t0 + timedelta(minutes=65), "snapshot_ids": [1, 2, 3, 4]}]
    assert [v for _, v in kept_series(snapshots, expired)] == [5, 6, 2, 3, 4]


def test_time_ticks_fall_on_round_times_not_on_the_data_points():
    from pipeline.ops.dashboard import time_ticks

    t0 = datetime(2026, 11, 22, 12, 13, 27, tzinfo=UTC).timestamp()  # a point's odd time
    ticks = time_ticks(t0, t0 + 3 * 3600)
    assert all(t % 3600 == 0 for t in ticks) and 2 <= len(ticks) <= 5, ticks
    assert [datetime.fromtimestamp(t, UTC).minute for t in time_ticks(t0, t0 + 600)] == [15, 20]


def test_a_line_breaks_where_nothing_was_measured_and_the_chart_fills_its_card():
    from pipeline.ops.dashboard import runs

    t0 = datetime(2026, 11, 22, tzinfo=UTC)
    minutes = [*range(10), *range(40, 50)]  # loads for 10 minutes, none for 30, then 10 more
    points = [(t0 + timedelta(minutes=m), float(m)) for m in minutes]
    assert [len(run) for run in runs([t.timestamp() for t, _ in points])] == [10, 10]
    # a few points in bursts (a lake's first snapshots, then loads a second apart) are no gap
    assert runs([0.0, 0.01, 0.02, 1.5, 3.0]) == [[0, 1, 2, 3, 4]]
    assert runs([0.0, 0.01, 0.02, 0.03, 1.5, 3.0, 4.4]) == [[0, 1, 2, 3, 4, 5, 6]]
    svg = chart(points, "s", "line")
    assert svg.count("<polyline") == 2  # no straight line drawn across the half hour without data
    assert 'style="width:100%;height:auto"' in svg and 'width="560"' not in svg
