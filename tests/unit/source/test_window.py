"""The window a run reads (pipeline/source/window.py), pure: bounds, look-back, the arrival rule, its SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pipeline.extract.partitions import time_chunks
from pipeline.source.window import UNDATED, Arrivals, Window, plan_window

T = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def test_first_window_takes_everything_up_to_upper():
    assert plan_window(None, timedelta(minutes=15), T) == Window(low=None, upper=T)


def test_next_window_rereads_the_lookback():
    window = plan_window(T - timedelta(hours=1), timedelta(minutes=15), T)
    assert window.low == T - timedelta(hours=1, minutes=15) and window.upper == T
    # rows without a finite timestamp are read by every window, so they reach the quarantine
    assert window.literal_sql() == ("(event_timestamp > '2026-11-21T10:45:00.000000+00:00'::timestamptz "
                                    "AND event_timestamp <= '2026-11-21T12:00:00.000000+00:00'::timestamptz "
                                    f"OR {UNDATED})")


def test_an_arrival_rule_narrows_the_window_to_what_arrived_or_became_due():
    arrivals = Arrivals("created_at", after=T - timedelta(seconds=30), due_after=T - timedelta(seconds=29))
    window = plan_window(T - timedelta(hours=1), timedelta(minutes=15), T, arrivals)
    assert window.low == T - timedelta(hours=1, minutes=15)  # the look-back still bounds the read
    assert window.literal_sql().endswith(
        " AND (\"created_at\" > '2026-11-21T11:59:30.000000+00:00'::timestamptz OR event_timestamp > "
        "'2026-11-21T11:59:31.000000+00:00'::timestamptz OR \"created_at\" IS NULL)")
    assert window.params() == {"low": window.low, "upper": T, "arrived_after": arrivals.after,
                               "due_after": arrivals.due_after}
    assert "%(arrived_after)s" in window.where_sql() and "arrived after" in window.describe()
    # a first load reads everything, whatever an earlier lake recorded
    assert plan_window(None, timedelta(minutes=15), T, arrivals).arrivals is None
    # every time chunk of the window keeps the rule
    chunks = time_chunks(window, 900, T - timedelta(minutes=1), T, rows_per_chunk=300)
    assert len(chunks) == 3 and all(chunk.arrivals == arrivals for chunk in chunks)



def test_a_part_of_a_window_keeps_its_arrival_rule_and_says_its_bounds_to_the_second():
    rule = Arrivals("created_at", T - timedelta(minutes=1), T - timedelta(seconds=30), xmin=1234)
    window = Window(T - timedelta(hours=1), T, arrivals=rule)
    part = window.split(T - timedelta(minutes=30), T, nulls=False)
    assert part.arrivals is rule and not part.nulls
    assert "event_timestamp IS NULL" not in part.literal_sql() and '"created_at"' in part.literal_sql()
    assert window.brief() == "(2026-11-21T11:00:00Z, 2026-11-21T12:00:00Z]"
    # the placeholders and their values agree: psycopg fills every one
    params = window.params()
    for name in ("upper", "low", "arrived_after", "due_after"):
        assert f"%({name})s" in window.where_sql() and name in params
    assert "by transactions from 1234" in window.describe()


def test_a_first_window_has_no_lower_bound_and_still_reads_rows_without_a_time():
    window = plan_window(None, timedelta(minutes=15), T)
    # -infinity is below every time, yet in no range: it is read with the undated rows, and so are
    # instants before year 1 and past the horizon (the start of the year after next)
    assert "low" not in window.params() and window.where_sql() == (
        "(event_timestamp >= '0001-01-01 00:00:00+00'::timestamptz AND event_timestamp <= %(upper)s "
        "OR (event_timestamp IS NULL OR NOT (event_timestamp >= '0001-01-01 00:00:00+00'::timestamptz "
        "AND event_timestamp < (date_trunc('year', now()) + interval '2 years'))))")
    assert window.describe().startswith("(-inf, ")
