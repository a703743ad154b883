"""The event model: weighted event types, each with its own realistic JSON ``details``.

Faker is slow per call (tens of microseconds), so each generator draws from pools of
Faker-made values built once per seed; a million events then take seconds, not minutes,
and stay realistic (real-looking user agents, IPs, endpoints, merchants…).
"""

from __future__ import annotations

import functools
import itertools
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from faker import Faker

EVENT_WEIGHTS: dict[str, int] = {
    "user_login": 35,
    "api_request": 25,
    "payment_processed": 15,
    "error_occurred": 10,
    "feature_usage": 15,
}

LOGIN_METHODS = ["password", "sso", "oauth_google", "oauth_github", "magic_link", "passkey"]
HTTP_METHODS = (("GET", "POST", "PUT", "PATCH", "DELETE"), (60, 25, 7, 4, 4))
STATUS_CODES = ((200, 201, 204, 301, 400, 401, 403, 404, 409, 429, 500, 502, 503),
                (70, 6, 3, 1, 4, 3, 2, 5, 1, 2, 1.5, 0.8, 0.7))
CURRENCIES = (("USD", "EUR", "GBP", "JPY", "CAD", "AUD", "CHF"), (45, 25, 10, 6, 6, 5, 3))
PAYMENT_METHODS = ["credit_card", "debit_card", "paypal", "apple_pay", "google_pay",
                   "bank_transfer", "klarna"]
PAYMENT_STATUS = (("success", "failed", "pending"), (80, 15, 5))
SEVERITIES = (("info", "warning", "error", "critical"), (20, 40, 30, 10))
SERVICES = ["auth-service", "payment-gateway", "search-api", "notification-worker",
            "inventory-service", "checkout-api", "user-profile", "recommendation-engine"]
ERROR_CODES = ["E_TIMEOUT", "E_CONN_REFUSED", "E_NULL_POINTER", "E_RATE_LIMIT",
               "E_DB_DEADLOCK", "E_VALIDATION", "E_OUT_OF_MEMORY", "E_UPSTREAM_5XX"]
FEATURES = ["dashboard", "export_csv", "dark_mode", "search", "reports", "notifications",
            "billing_portal", "team_invite", "api_keys", "saved_filters"]
FEATURE_ACTIONS = ["view", "click", "enable", "disable", "share", "configure"]
API_PATHS = ["/api/v1/users/{id}", "/api/v1/orders", "/api/v1/orders/{id}", "/api/v1/search",
             "/api/v1/products/{id}", "/api/v2/payments", "/api/v1/sessions", "/health",
             "/api/v1/reports/{id}/export", "/api/v2/inventory"]


_V4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_V4_SET = (0x4000 << 64) | (0x8000 << 48)


def random_uuid4(rng: random.Random) -> uuid.UUID:
    """A version-4 UUID from ``rng`` (so ``--seed`` reproduces ids too)."""
    return uuid.UUID(int=(rng.getrandbits(128) & _V4_CLEAR) | _V4_SET)


@functools.cache
def _cumulative(options: tuple[tuple, tuple]) -> tuple[tuple, tuple]:
    return options[0], tuple(itertools.accumulate(options[1]))


@dataclass(frozen=True, slots=True)
class Event:
    event_id: uuid.UUID
    event_type: str
    event_timestamp: datetime
    details: dict[str, Any]


@dataclass
class Session:
    """A row of the generator's sessions table (``sql/source_sessions.sql``): a table with its own
    id and time columns, loaded with ``SOURCE_TABLES=public.sessions:started_at:session_id``."""

    session_id: uuid.UUID
    user_id: str
    started_at: datetime
    ip_address: str


@dataclass(frozen=True)
class Pools:
    """Faker-made values events draw from: the same users, merchants and hosts come back."""

    user_ids: list[str]
    customer_ids: list[str]
    merchants: list[str]
    ips: list[str]
    user_agents: list[str]
    messages: list[str]


@functools.cache
def make_pools(seed: int = 0, size: int = 2_000) -> Pools:
    fake = Faker()
    fake.seed_instance(seed)
    return Pools(
        user_ids=[f"user_{fake.unique.random_int(100000, 999999)}" for _ in range(size)],
        customer_ids=[f"cus_{fake.unique.bothify('??########').lower()}" for _ in range(size)],
        merchants=[f"mch_{fake.slug(fake.company())[:24]}" for _ in range(200)],
        ips=[fake.ipv4_public() if i % 5 else fake.ipv6() for i in range(size)],
        user_agents=[fake.user_agent() for _ in range(300)],
        messages=[fake.sentence(nb_words=8) for _ in range(300)],
    )


EVENTS_PER_SESSION = 3  # the generator's --sessions mode: each session's events


class EventFactory:
    """Makes events; reproducible for a given ``seed`` (and ``pool_seed``)."""

    def __init__(self, seed: int | None = None, pool_seed: int = 0) -> None:
        self.rng = random.Random(seed)
        pools = make_pools(pool_seed)
        self.user_ids, self.customer_ids = pools.user_ids, pools.customer_ids
        self.merchants, self.ips = pools.merchants, pools.ips
        self.user_agents, self.messages = pools.user_agents, pools.messages
        self._types = list(EVENT_WEIGHTS)
        self._cum_weights = list(itertools.accumulate(EVENT_WEIGHTS.values()))
        self._details: dict[str, Callable[[], dict[str, Any]]] = {
            "user_login": self.login_details,
            "api_request": self.api_details,
            "payment_processed": self.payment_details,
            "error_occurred": self.error_details,
            "feature_usage": self.feature_details,
        }

    def _id(self) -> str:
        return str(random_uuid4(self.rng))

    def _pick(self, options: tuple[tuple, tuple]) -> Any:
        population, cum_weights = _cumulative(options)
        return self.rng.choices(population, cum_weights=cum_weights)[0]

    def login_details(self) -> dict[str, Any]:
        r = self.rng
        return {"user_id": r.choice(self.user_ids), "ip_address": r.choice(self.ips),
                "user_agent": r.choice(self.user_agents), "session_id": self._id(),
                "login_method": r.choice(LOGIN_METHODS), "success": r.random() > 0.04}

    def api_details(self) -> dict[str, Any]:
        r = self.rng
        status = self._pick(STATUS_CODES)
        base = r.lognormvariate(3.8, 0.7)
        return {"endpoint": r.choice(API_PATHS).replace("{id}", str(r.randint(1, 99999))),
                "method": self._pick(HTTP_METHODS), "status_code": status,
                "response_time_ms": round(base * (4 if status >= 500 else 1), 1),
                "request_id": f"req_{self.rng.getrandbits(64):016x}",
                "user_id": r.choice(self.user_ids)}

    def payment_details(self) -> dict[str, Any]:
        r = self.rng
        currency = self._pick(CURRENCIES)
        amount = round(r.lognormvariate(3.6, 1.0), 0 if currency == "JPY" else 2)
        return {"transaction_id": f"txn_{self.rng.getrandbits(64):016x}",
                "amount": amount * (100 if currency == "JPY" else 1),
                "currency": currency, "payment_method": r.choice(PAYMENT_METHODS),
                "status": self._pick(PAYMENT_STATUS), "customer_id": r.choice(self.customer_ids),
                "merchant_id": r.choice(self.merchants)}

    def error_details(self) -> dict[str, Any]:
        r = self.rng
        return {"error_code": r.choice(ERROR_CODES), "severity": self._pick(SEVERITIES),
                "service": r.choice(SERVICES), "message": r.choice(self.messages),
                "stack_trace_hash": f"{self.rng.getrandbits(160):040x}",
                "host": f"{r.choice(SERVICES)}-{r.randint(1, 12)}"}

    def feature_details(self) -> dict[str, Any]:
        r = self.rng
        return {"feature_name": r.choice(FEATURES), "action": r.choice(FEATURE_ACTIONS),
                "duration_ms": int(r.expovariate(1 / 4000)), "user_id": r.choice(self.user_ids)}

    def make(self, now: datetime, *, late_fraction: float = 0.0,
             late_by: timedelta = timedelta(minutes=5)) -> Event:
        """One event at ``now`` (with up to 2 s jitter), or ``late_by`` earlier when late."""
        r = self.rng
        event_type = r.choices(self._types, cum_weights=self._cum_weights)[0]
        offset = r.uniform(0, 2.0)
        if late_fraction and r.random() < late_fraction:
            offset += late_by.total_seconds() * r.uniform(0.8, 1.0)
        return Event(random_uuid4(r), event_type, now - timedelta(seconds=offset),
                     self._details[event_type]())

    def batch(self, n: int, now: datetime, **kwargs: Any) -> list[Event]:
        return [self.make(now, **kwargs) for _ in range(n)]

    def sessions(self, n: int, now: datetime, events_each: int = EVENTS_PER_SESSION,
                 **kwargs: Any) -> tuple[list[Session], list[Event]]:
        """``n`` sessions and ``events_each`` events of each (``details.session_id`` names its
        session's ``session_id``): linked rows an application writes in one transaction."""
        sessions, events = [], []
        for _ in range(n):
            event = self.make(now, **kwargs)
            session = Session(random_uuid4(self.rng), self.rng.choice(self.user_ids), event.event_timestamp,
                              self.rng.choice(self.ips))
            sessions.append(session)
            for _ in range(events_each):
                member = replace(self.make(now, **kwargs), event_timestamp=session.started_at)
                member.details["session_id"] = str(session.session_id)
                member.details["user_id"] = session.user_id
                events.append(member)
        return sessions, events
