"""The scheduler's retry policy (pipeline/ops/policy.py), pure: how long a failing job waits is
decided by the error's type, never by retrying every tick."""

from __future__ import annotations

from datetime import timedelta

import duckdb
import pytest

from pipeline.errors import CatalogUnavailable, ConfigError
from pipeline.ops.policy import FIX_RETRY, FOLLOW_MAX_BACKOFF, backoff_delay, needs_a_fix, retry_delay

MINUTE = timedelta(minutes=1)


def test_a_temporary_failure_backs_off_0_1_3_7_intervals_up_to_the_cap():
    assert [backoff_delay(MINUTE, n) for n in range(1, 6)] == [timedelta(0), MINUTE, 3 * MINUTE, 7 * MINUTE,
                                                              15 * MINUTE]
    assert backoff_delay(MINUTE, 40) == timedelta(hours=6)  # capped, however long the outage
    # a follower's cap keeps its backoff short: back within seconds of the service
    assert backoff_delay(timedelta(seconds=2), 30, FOLLOW_MAX_BACKOFF) == FOLLOW_MAX_BACKOFF


@pytest.mark.parametrize("error", [ConfigError("x", "y"), duckdb.ParserException("syntax error"),
                                   duckdb.BinderException("no such column")])
def test_a_failure_that_needs_a_fix_waits_ten_minutes_or_one_interval(error):
    assert needs_a_fix(error)
    assert retry_delay(MINUTE, 1, error) == FIX_RETRY  # not every tick, not the 6-hour cap
    assert retry_delay(timedelta(hours=1), 5, error) == timedelta(hours=1)


def test_a_service_away_is_temporary_and_an_unclassified_error_backs_off_too():
    for error in (CatalogUnavailable("catalog away", "wait"), RuntimeError("who knows")):
        assert not needs_a_fix(error)
        assert retry_delay(MINUTE, 3, error) == 3 * MINUTE


def test_a_missing_source_table_is_looked_for_again_soon_then_every_ten_minutes():
    """A stack started at once: the pipeline's first load comes moments before the application
    creates its table, and then waited 10 minutes for it; a table that never comes (a misspelled
    SOURCE_TABLE) is still looked for only every 10 minutes, and said to need a fix."""
    from pipeline.errors import SourceTableMissing
    from pipeline.ops.policy import MAX_BACKOFF

    missing = SourceTableMissing("The source table public.events does not exist.")
    every = timedelta(seconds=10)
    assert [retry_delay(every, n, missing, MAX_BACKOFF).total_seconds() for n in (1, 2, 3, 4)] == [0, 10, 30, 70]
    assert retry_delay(every, 40, missing, MAX_BACKOFF) == FIX_RETRY
    assert retry_delay(timedelta(hours=1), 3, missing, MAX_BACKOFF) == timedelta(hours=1)  # one interval
    assert needs_a_fix(missing)


def test_a_table_not_made_yet_is_looked_for_within_ten_minutes_however_long_the_interval():
    """LOAD_EVERY=1h: a stack's first load, run before the application made its table, was tried
    again an hour later (the docs say at most every 10 minutes); a short interval keeps its backoff."""
    from pipeline.errors import SourceTableMissing
    from pipeline.ops.policy import sooner_than_the_interval

    missing = SourceTableMissing("The source table public.events does not exist.")
    assert sooner_than_the_interval(timedelta(hours=1), missing) == FIX_RETRY
    assert sooner_than_the_interval(timedelta(seconds=10), missing) is None  # 10 s, 30 s, … as before
    assert sooner_than_the_interval(timedelta(hours=1), ConfigError("bad")) is None
