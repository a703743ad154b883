"""The event model and its generators: weights, details, seeds, late events (pure)."""

from __future__ import annotations

import collections
from datetime import UTC, datetime, timedelta

from generators.events import EVENT_WEIGHTS, EventFactory

DETAIL_KEYS = {
    "user_login": {"user_id", "ip_address", "user_agent", "session_id", "login_method"},
    "api_request": {"endpoint", "method", "status_code", "response_time_ms", "request_id"},
    "payment_processed": {"transaction_id", "amount", "currency", "payment_method", "status",
                          "customer_id", "merchant_id"},
    "error_occurred": {"error_code", "severity", "service", "message", "stack_trace_hash"},
    "feature_usage": {"feature_name", "action", "duration_ms", "user_id"},
}


def test_event_types_follow_their_weights_and_carry_their_details():
    now = datetime.now(UTC)
    events = EventFactory(seed=1).batch(20_000, now)
    counts = collections.Counter(e.event_type for e in events)
    for event_type, weight in EVENT_WEIGHTS.items():
        assert abs(counts[event_type] / 20_000 - weight / 100) < 0.02
    for event in events[:2000]:
        assert DETAIL_KEYS[event.event_type] <= event.details.keys()
        assert now - timedelta(seconds=3) <= event.event_timestamp <= now


def test_payments_are_mostly_successful_and_errors_include_critical():
    events = EventFactory(seed=2).batch(30_000, datetime.now(UTC))
    statuses = collections.Counter(e.details["status"] for e in events if e.event_type == "payment_processed")
    assert abs(statuses["success"] / sum(statuses.values()) - 0.80) < 0.03
    assert {"success", "failed", "pending"} == set(statuses)
    severities = {e.details["severity"] for e in events if e.event_type == "error_occurred"}
    assert "critical" in severities
    codes = collections.Counter(e.details["status_code"] for e in events if e.event_type == "api_request")
    assert codes.most_common(1)[0][0] == 200


def test_same_seed_same_events():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert EventFactory(seed=5).batch(50, now) == EventFactory(seed=5).batch(50, now)


def test_late_events_are_stamped_in_the_past():
    now = datetime.now(UTC)
    events = EventFactory(seed=3).batch(1000, now, late_fraction=0.1, late_by=timedelta(minutes=5))
    late = [e for e in events if e.event_timestamp < now - timedelta(minutes=3)]
    assert 50 < len(late) < 150
