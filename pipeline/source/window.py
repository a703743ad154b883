"""Pure planning of what one run extracts: the window ``(watermark - lookback, upper]``.

``upper`` is fixed when the run starts, from the source's clock. Nothing here touches a
database, so every rule of the window is tested without one.

With an arrival column (``SOURCE_ARRIVAL_COLUMN``, the source's ``created_at``) a run reads of
that window only what it could not have read before: rows that arrived after the last batch's
arrival mark, and rows that became due since its plan (dated after its ``upper``). The look-back
stays the bound of what a run may read; it is no longer what every run reads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from pipeline.columns import WallClock
from pipeline.sqltext import quote_ident

XID_SPAN = 2 ** 32
# A time column may hold ±infinity, which is in no time range and no datetime: such a row is read
# with the undated ones (NULL) and quarantined. A -infinity stopped every run ("timestamp too
# small": the first load's range took it, and its min), an infinity waited as future-dated for ever.
# So do instants before year 1 (no Python datetime holds them: "timestamp too small" stopped every
# run too) and after DuckDB's last (its Postgres reader wrapped one round to a date 290,279 BC).
# And so does a time past the horizon: no event the source's clock will reach soon (a 2099 typed for
# 1999) but a bad value, set aside with the undated rows with its reason — waited for as future-dated,
# one such row kept --status stale until 2099. The horizon is the start of the year after next (at
# least a year ahead): one instant for every transaction of a load (their now() differ, the year
# they start in does not; a load whose readers straddle New Year's midnight fails its count and runs
# again). It is far below DuckDB's last instant (294247), which it replaces as the bound.
EARLIEST = "'0001-01-01 00:00:00+00'::timestamptz"
LATEST = "(date_trunc('year', now()) + interval '2 years')"
DATED = f"event_timestamp >= {EARLIEST} AND event_timestamp < {LATEST}"  # what a time range can hold
FINITE_FLOOR = f"event_timestamp >= {EARLIEST}"  # what a range without a low bound starts at
UNDATED = f"(event_timestamp IS NULL OR NOT ({DATED}))"
# A row written by a writer whose clock is up to this far behind the database's is still found
# through the arrival column's index; the transaction id then says whether it is new. A row
# further behind (a backfill) is left to the identity check, which reads the whole look-back.
SKEW_BOUND = timedelta(minutes=1)


def complete_after(low: datetime | None, now: datetime, retention: timedelta) -> datetime | None:
    """Where a comparison of lake and source may start: ``low``, or later when the source keeps
    only ``retention`` (SOURCE_RETENTION; zero: every row). A row older than that may be gone from
    the source by its own hand: the lake keeps it, and no comparison counts it as deleted."""
    if not retention:
        return low
    kept_from = now - retention
    return kept_from if low is None or low < kept_from else low


@dataclass(frozen=True)
class Arrivals:
    """What an earlier plan already saw. With ``xmin`` (the oldest transaction its snapshot
    still saw running, a 64-bit transaction id), every row whose writing transaction is older was
    committed and visible to it: no clock decides, whatever a writer stamps in ``column``, which
    only narrows the read through its index (:data:`SKEW_BOUND` behind ``after``). Without, every
    row whose ``column`` is at or before ``after`` was (the database's clock stamps it). Either
    way, rows dated after ``due_after`` (that plan's ``upper``) are read: they became due since."""

    column: str
    after: datetime  # the earlier plan's arrival mark (pipeline.source.arrivals)
    due_after: datetime  # the earlier plan's upper
    xmin: int | None = None  # the earlier plan's snapshot's xmin (pg_snapshot_xmin), None: unknown

    def _new_sql(self, after: str, xmin32: str) -> str:
        col = quote_ident(self.column)
        if self.xmin is None:
            return f"{col} > {after}"
        # the row's 32-bit xmin at or after the earlier snapshot's, modulo 2**32 (a window of 2**31
        # transactions: the plan checks the earlier one is far closer); a frozen or older row reads
        # as new at worst, and is then only read again
        return (f"({col} > {after}::timestamptz - interval '{int(SKEW_BOUND.total_seconds())} seconds' "
                f"AND mod(xmin::text::bigint - {xmin32} + {XID_SPAN}, {XID_SPAN}) < {XID_SPAN // 2})")

    def arrived_sql(self) -> str:
        """Rows that arrived since the earlier plan, whatever their dates (psycopg placeholders)."""
        return self._new_sql('%(arrived_after)s', '%(xmin32)s')

    def where_sql(self) -> str:
        # a row without an arrival time is always read (the look-back bounds it, as before)
        col = quote_ident(self.column)
        return (f"({self.arrived_sql()} OR event_timestamp > %(due_after)s "
                f"OR {col} IS NULL)")

    def params(self) -> dict[str, object]:
        values: dict[str, object] = {"arrived_after": self.after, "due_after": self.due_after}
        if self.xmin is not None:
            values["xmin32"] = self.xmin % XID_SPAN
        return values

    def literal_sql(self) -> str:
        col = quote_ident(self.column)
        new = self._new_sql(f"'{iso(self.after)}'::timestamptz",
                            str(self.xmin % XID_SPAN) if self.xmin is not None else "")
        return f"({new} OR event_timestamp > '{iso(self.due_after)}'::timestamptz OR {col} IS NULL)"


def range_sql(low: str | None, upper: str, wall_clock: WallClock | None = None) -> str:
    """``event_timestamp`` in ``(low, upper]`` (SQL expressions of instants; no ``low``: from the first
    dated instant), with a naive time column's bounds for its index (:class:`WallClock`)."""
    floor = f"event_timestamp > {low}" if low is not None else FINITE_FLOOR
    hint = "" if wall_clock is None else f" AND {wall_clock.range_hint_sql(low, upper)}"
    return f"{floor} AND event_timestamp <= {upper}{hint}"


@dataclass(frozen=True)
class Window:
    """Half-open window on ``event_timestamp``: ``low < ts <= upper``; ``low=None`` means all.

    Rows without a finite ``event_timestamp`` (NULL, ±infinity) belong to no time range; a window
    with ``nulls`` reads them too, so they reach promotion and are quarantined rather than never
    read. (Every run's window has it; of the time chunks a window is split into, only the first.)
    """

    low: datetime | None
    upper: datetime
    nulls: bool = True
    arrivals: Arrivals | None = None  # read only what arrived or became due since that plan
    wall_clock: WallClock | None = None  # the source's time column is naive (its index's bounds)
    # rows dated after ``upper`` read with the window (an SQL predicate; None: none): those of the
    # transactions whose other rows it reads (pipeline.load.plan.whole_transactions). Read by the
    # chunk that reads the undated rows; outside the range every proof compares
    pulled: str | None = None

    def where_sql(self) -> str:
        """Predicate with psycopg placeholders (see :meth:`params`)."""
        return self._predicate("%(low)s" if self.low is not None else None, "%(upper)s",
                               self.arrivals.where_sql() if self.arrivals else None)

    def params(self) -> dict[str, object]:
        values: dict[str, object] = {"upper": self.upper}
        if self.low is not None:
            values["low"] = self.low
        if self.arrivals is not None:
            values.update(self.arrivals.params())
        return values

    def literal_sql(self) -> str:
        """The same predicate with timestamp literals, for JDBC subqueries that take no params."""
        return self._predicate(f"'{iso(self.low)}'::timestamptz" if self.low is not None else None,
                               f"'{iso(self.upper)}'::timestamptz",
                               self.arrivals.literal_sql() if self.arrivals else None)

    def _predicate(self, low: str | None, upper: str, arrived: str | None) -> str:
        dated = range_sql(low, upper, self.wall_clock)
        if self.nulls:  # and the rows with no time (their index bounds too, for a naive column)
            undated = (UNDATED if self.wall_clock is None
                       else f"({UNDATED} AND {self.wall_clock.undated_hint_sql()})")
            dated = f"({dated} OR {undated})"
        read = f"{dated} AND {arrived}" if arrived else dated
        return f"(({read}) OR ({self.pulled}))" if self.pulled and self.nulls else read

    def split(self, low: datetime | None, upper: datetime, nulls: bool) -> Window:
        """A part of this window (a time chunk): the same arrivals rule over ``(low, upper]``; the
        pulled rows go with the undated ones."""
        return replace(self, low=low, upper=upper, nulls=nulls)

    def describe(self) -> str:
        low = iso(self.low) if self.low else "-inf"
        arrived = ""
        if self.arrivals:
            xid = f" by transactions from {self.arrivals.xmin}" if self.arrivals.xmin else ""
            arrived = (f" arrived after {iso(self.arrivals.after)}{xid} or due after "
                       f"{iso(self.arrivals.due_after)}")
        pulled = " and the later rows of its transactions" if self.pulled else ""
        return f"({low}, {iso(self.upper)}]{arrived}{pulled}"

    def brief(self) -> str:
        """The bounds to the second, for a snapshot's commit message (a line people read in
        ``--snapshots``; the exact bounds are in its extra info)."""
        def second(ts: datetime) -> str:
            return iso(ts)[:19] + "Z"
        return f"({second(self.low) if self.low else '-inf'}, {second(self.upper)}]"


def iso(ts: datetime) -> str:
    """UTC ISO-8601 with microseconds, the one text form used in SQL, manifests and logs."""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC).isoformat(timespec="microseconds")


def parse_iso(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def plan_window(watermark: datetime | None, lookback: timedelta, upper: datetime,
                arrivals: Arrivals | None = None) -> Window:
    """The next window: everything up to ``upper`` on a first run, else re-read ``lookback``
    — of which only what arrived or became due since an earlier plan, given its ``arrivals``."""
    if watermark is None:
        return Window(low=None, upper=upper)
    low = min(watermark - lookback, upper)
    return Window(low=low, upper=upper, arrivals=arrivals)
