"""Health judged from the job history and lag, with an injected clock (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pipeline.ops.health import FAILING, HEALTHY, STALE, assess

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


def test_health_is_judged_from_the_last_success_failures_and_set_aside_batches():
    assert assess(NOW, HOUR, NOW - HOUR, "success", None, 0, 1).code == HEALTHY
    empty = assess(NOW, HOUR, None, None, None, 0, 0)  # an empty source, never loaded: not healthy
    assert empty.code == STALE and "nothing loaded yet (run Pipeline.run()" in empty.reasons[0]
    never = assess(NOW, HOUR, None, None, None, 0, 10)
    assert never.code == STALE and "nothing loaded yet" in never.reasons[0]
    late = assess(NOW, HOUR, NOW - 3 * HOUR, "success", None, 0, 1)
    assert late.code == STALE and "3h ago (LOAD_EVERY 1h)" in late.reasons[0]
    failed = assess(NOW, HOUR, NOW - 3 * HOUR, "failed", "source down", 0, 1)
    assert failed.code == FAILING and "source down" in failed.reasons[0] and len(failed.reasons) == 2
    assert assess(NOW, HOUR, NOW, "success", None, 1, 1).code == FAILING


def test_a_follower_backs_off_for_seconds_not_hours():
    """--follow's 2-s loads after a 30-s outage waited 32 s more, and after hours of outage would
    have waited hours: its backoff is capped at FOLLOW_MAX_BACKOFF; a scheduler's keeps 6 h."""
    from datetime import timedelta

    from pipeline.errors import CatalogUnavailable, ConfigError
    from pipeline.ops.policy import FOLLOW_MAX_BACKOFF, MAX_BACKOFF, retry_delay

    down = CatalogUnavailable("catalog down")
    every = timedelta(seconds=2)
    assert [retry_delay(every, n, down, FOLLOW_MAX_BACKOFF).total_seconds() for n in (1, 2, 3, 4)] == [0, 2, 6, 14]
    assert retry_delay(every, 40, down, FOLLOW_MAX_BACKOFF) == FOLLOW_MAX_BACKOFF
    assert retry_delay(every, 40, ConfigError("bad"), FOLLOW_MAX_BACKOFF) == FOLLOW_MAX_BACKOFF
    assert retry_delay(timedelta(minutes=1), 40, down) == MAX_BACKOFF


def test_a_failure_that_needs_a_fix_is_tried_again_within_minutes_not_hours():
    """A fresh stack's scheduler found no source table at its first load (the generator had not
    run yet) and waited its 6-h cap: the table came a minute later, the loads hours later."""
    from datetime import timedelta

    from pipeline.errors import ConfigError, TerminalError
    from pipeline.ops.policy import FIX_RETRY, retry_delay

    missing = TerminalError("The source table public.events does not exist.")
    assert retry_delay(timedelta(seconds=10), 1, missing) == FIX_RETRY == timedelta(minutes=10)
    assert retry_delay(timedelta(hours=1), 1, ConfigError("bad")) == timedelta(hours=1)  # one interval


def test_a_lost_commit_is_temporary_and_a_missing_database_is_not():
    from pipeline.errors import is_transient

    # seen in the compose stack: the network's DNS failed once as a neighbour container stopped,
    # and the load waited 10 minutes as for an error that needs a fix
    assert is_transient("Cannot reach the catalog (DUCKLAKE_CATALOG=…) to take the lock: failed to resolve "
                        "host 'postgres': [Errno -3] Temporary failure in name resolution")

    lost = 'TransactionContext Error: Failed to commit: Failed to execute query "ROLLBACK": '
    assert is_transient(lost)  # the catalog went away inside COMMIT: retried, not set aside
    missing = ('connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  '
               'database "x" does not exist')
    assert not is_transient(missing)  # a setting to fix, however the driver words it
    assert is_transient('connection to server at "127.0.0.1", port 5432 failed: Connection refused')


def test_sql_duckdb_cannot_parse_or_bind_needs_a_fix_and_is_not_called_temporary():
    """A ParserError in a follower's load was logged 'temporary' and backed off as an outage."""
    import duckdb

    from pipeline.errors import CatalogUnavailable
    from pipeline.ops.policy import needs_a_fix

    con = duckdb.connect()
    for bad in ("SELECT count(*) FROM (SELECT 1 AS at) WHERE at > 0", "SELECT no_such_column FROM range(1)"):
        try:
            con.execute(bad)
        except duckdb.Error as exc:
            assert needs_a_fix(exc), exc
        else:
            raise AssertionError(f"{bad} ran")
    assert not needs_a_fix(CatalogUnavailable("catalog down"))
    assert not needs_a_fix(duckdb.IOException("connection lost"))


def test_a_follower_is_judged_by_its_own_interval_and_record_cadence():
    """A dead --follow --every 2s stayed healthy for 120 s (judged by its one-minute record as if it
    were LOAD_EVERY), and --status then named 'LOAD_EVERY 1m', a value never set."""
    from pipeline.ops.health import Cadence

    follower = Cadence(timedelta(seconds=2), "FOLLOW_EVERY", timedelta(minutes=1))
    assert assess(NOW, follower, NOW - timedelta(seconds=50), "success", None, 0, 1).code == HEALTHY
    dead = assess(NOW, follower, NOW - timedelta(seconds=70), "success", None, 0, 1)
    assert dead.code == STALE
    assert "(FOLLOW_EVERY 2s, recorded every 1m)" in dead.reasons[0] and "LOAD_EVERY" not in dead.reasons[0]


def test_an_old_answer_turns_stale_only_once_the_time_since_the_last_success_passes_the_bound():
    """A slow reading is no failure: the last answer stands, counted to now, stale by age alone."""
    from dataclasses import replace

    from pipeline.ops.health import aged

    judged = assess(NOW, HOUR, NOW - 10 * MINUTE, "success", None, 0, 5)
    assert judged.code == HEALTHY and judged.stale_after == 2 * HOUR.total_seconds()
    assert aged(replace(judged, seconds_since_success=HOUR.total_seconds()), "as of 40s").code == HEALTHY
    old = aged(replace(judged, seconds_since_success=3 * HOUR.total_seconds()), "as an answer 40s old knows")
    assert old.code == STALE and "3h ago (as an answer 40s old knows)" in old.reasons[-1]
    nothing_to_load = assess(NOW, HOUR, NOW - 10 * MINUTE, "success", None, 0, 0)
    assert aged(replace(nothing_to_load, seconds_since_success=9e9), "as of 40s").code == HEALTHY
