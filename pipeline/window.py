"""Pure planning of what one run extracts: the window and how to split the read.

The window is ``(watermark - lookback, upper]`` with ``upper`` fixed when the run starts
(DESIGN "Incremental window"). Nothing here touches a database.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True)
class Window:
    """Half-open window on ``event_timestamp``: ``low < ts <= upper``; ``low=None`` means all."""

    low: datetime | None
    upper: datetime

    def where_sql(self) -> str:
        """Predicate with psycopg placeholders (see :meth:`params`)."""
        if self.low is None:
            return "event_timestamp <= %(upper)s"
        return "event_timestamp > %(low)s AND event_timestamp <= %(upper)s"

    def params(self) -> dict[str, datetime]:
        values = {"upper": self.upper}
        if self.low is not None:
            values["low"] = self.low
        return values

    def literal_sql(self) -> str:
        """The same predicate with timestamp literals, for JDBC subqueries that take no params."""
        upper = f"event_timestamp <= '{iso(self.upper)}'::timestamptz"
        if self.low is None:
            return upper
        return f"event_timestamp > '{iso(self.low)}'::timestamptz AND {upper}"

    def describe(self) -> str:
        low = iso(self.low) if self.low else "-inf"
        return f"({low}, {iso(self.upper)}]"


def iso(ts: datetime) -> str:
    """UTC ISO-8601 with microseconds, the one text form used in SQL, manifests and logs."""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC).isoformat(timespec="microseconds")


def parse_iso(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def plan_window(watermark: datetime | None, lookback: timedelta, upper: datetime) -> Window:
    """The next window: everything up to ``upper`` on a first run, else re-read ``lookback``."""
    if watermark is None:
        return Window(low=None, upper=upper)
    low = min(watermark - lookback, upper)
    return Window(low=low, upper=upper)


ROWS_PER_PARTITION = 250_000


def plan_partitions(rows: int, cores: int, *, rows_per_partition: int = ROWS_PER_PARTITION) -> int:
    """How many JDBC partitions to read ``rows`` with on ``cores`` cores.

    Enough partitions to keep every core busy once the read is big enough to be worth
    splitting, and none so large that one task holds millions of rows; never more than
    4 per core (each is a Postgres connection and a staging file).
    """
    if rows <= 0:
        return 1
    by_size = math.ceil(rows / rows_per_partition)
    wanted = max(by_size, cores if rows >= 50_000 else 1)
    return max(1, min(wanted, 4 * max(cores, 1)))
