"""Health judged from the job history and lag, with an injected clock (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pipeline.ops.health import FAILING, HEALTHY, STALE, assess

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)


def test_health_is_judged_from_the_last_success_failures_and_set_aside_batches():
    assert assess(NOW, HOUR, NOW - HOUR, "success", None, 0, 1).code == HEALTHY
    assert assess(NOW, HOUR, None, None, None, 0, 0).code == HEALTHY  # nothing to load yet
    never = assess(NOW, HOUR, None, None, None, 0, 10)
    assert never.code == STALE and "nothing loaded yet" in never.reasons[0]
    late = assess(NOW, HOUR, NOW - 3 * HOUR, "success", None, 0, 1)
    assert late.code == STALE and "3h ago (LOAD_EVERY 1h)" in late.reasons[0]
    failed = assess(NOW, HOUR, NOW - 3 * HOUR, "failed", "source down", 0, 1)
    assert failed.code == FAILING and "source down" in failed.reasons[0] and len(failed.reasons) == 2
    assert assess(NOW, HOUR, NOW, "success", None, 1, 1).code == FAILING
