"""Pure planning of what one run extracts: the window ``(watermark - lookback, upper]``.

``upper`` is fixed when the run starts, from the source's clock. Nothing here touches a
database, so every rule of the window is tested without one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True)
class Window:
    """Half-open window on ``event_timestamp``: ``low < ts <= upper``; ``low=None`` means all.

    Rows without an ``event_timestamp`` belong to no time range; a window with ``nulls`` reads
    them too, so they reach promotion and are quarantined rather than never read. (Every run's
    window has it; of the time chunks a window is split into, only the first.)
    """

    low: datetime | None
    upper: datetime
    nulls: bool = True

    def where_sql(self) -> str:
        """Predicate with psycopg placeholders (see :meth:`params`)."""
        range_sql = "event_timestamp <= %(upper)s"
        if self.low is not None:
            range_sql = f"event_timestamp > %(low)s AND {range_sql}"
        return f"({range_sql} OR event_timestamp IS NULL)" if self.nulls else range_sql

    def params(self) -> dict[str, datetime]:
        values = {"upper": self.upper}
        if self.low is not None:
            values["low"] = self.low
        return values

    def literal_sql(self) -> str:
        """The same predicate with timestamp literals, for JDBC subqueries that take no params."""
        range_sql = f"event_timestamp <= '{iso(self.upper)}'::timestamptz"
        if self.low is not None:
            range_sql = f"event_timestamp > '{iso(self.low)}'::timestamptz AND {range_sql}"
        return f"({range_sql} OR event_timestamp IS NULL)" if self.nulls else range_sql

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
