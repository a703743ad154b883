"""The columns every stage speaks of, and how a table with its own reads as them.

Every stage names a row by ``event_id`` and dates it by ``event_timestamp`` (and reads
``event_type``, ``details`` and ``created_at``): the staged files, the SQL of the window, the
identity check, validation and verification. A table with its own id or time column
(``SOURCE_TABLES=public.sessions:started_at:session_id``), or without ``event_type`` or
``details``, is read through a relation that adds those names — its id column again as
``event_id``, its time column as ``event_timestamp``, NULL for an optional column it lacks —
beside every column of its own. So the stages keep one vocabulary while the lake table keeps
the table's own columns; the relation is plain enough that Postgres and DuckDB push a range on
``event_timestamp`` down to the time column's index or file statistics.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.sqltext import quote_ident

ID, TIME = "event_id", "event_timestamp"
# The five columns of an event, in the order the source, the staged files and the lake hold them;
# columns the source adds later (schema drift) follow them.
EVENT_COLUMNS = ("event_id", "event_type", "event_timestamp", "details", "created_at")
# the columns beside the id and the time that a table may lack, and the type it reads as then
OPTIONAL = {"event_type": "text", "details": "json", "created_at": "timestamptz"}
# and the type a lake table holds it in
OPTIONAL_LAKE_TYPES = {"event_type": "VARCHAR", "details": "JSON", "created_at": "TIMESTAMPTZ"}


def canonical_relation(table_sql: str, id_column: str = ID, time_column: str = TIME,
                       absent: Iterable[str] = (), *, system_columns: bool = False,
                       wall_clock: WallClock | None = None) -> str:
    """``table_sql`` as the stages read it (itself when it already has the canonical names).
    ``system_columns``: Postgres' ``xmin`` and ``ctid`` stay reachable through it (the arrival
    rule and page-range slices read them). ``wall_clock``: the time column is naive, and is read as
    the instant it means in the session's zone (see :class:`WallClock`)."""
    instant = None if wall_clock is None else wall_clock.instant_sql(time_column)
    added = ([f"{quote_ident(id_column)} AS {ID}"] if id_column != ID else []) + \
        ([f"{instant or quote_ident(time_column)} AS {TIME}"] if time_column != TIME or instant else []) + \
        [f"NULL::{OPTIONAL[name]} AS {name}" for name in absent]
    if not added:
        return table_sql
    system = ["xmin", "ctid"] if system_columns else []
    if wall_clock is not None:
        system.append(f"{quote_ident(time_column)} AS {quote_ident(wall_clock.column)}")
    own = "*" if wall_clock is None or time_column != TIME else \
        ", ".join(quote_ident(name) for name in wall_clock.columns if name != TIME)
    return f"(SELECT {', '.join([own, *system, *added])} FROM {table_sql}) AS shaped"


# The naive times Postgres can read as instants in every zone: within a day of its bounds a
# conversion raises (in a zone west or east of UTC), and stopped every read of such a row
CONVERTIBLE_WALL_TIMES = "BETWEEN '4713-11-26 BC' AND '294276-12-30'"


@dataclass(frozen=True)
class WallClock:
    """A naive (``timestamp without time zone``) time column: wall-clock time in the session's zone.

    Compared with an instant, Postgres converts each value; but its index is ordered by wall time,
    and across a daylight-saving change (a spring-forward gap holding values) that order is not the
    instants' order: an index scan and a sequential scan returned different rows for one range, so
    the rows a load read and the ones it proved could differ from the ones --verify read. So the
    relation reads the column as its instant (``event_timestamp``, exact, per row) and keeps the wall
    time reachable as ``column``, and a range adds :meth:`range_hint_sql`: bounds on the wall time
    that the index can use, wide enough to hold every row of the range whatever offset it is read
    with (any offset the zone has within a day of either bound)."""

    column: str  # the relation's name for the wall time (no column of the table's)
    columns: tuple[str, ...]  # the table's columns (a table whose time column is event_timestamp lists them)
    # the session's zone is one of the time zone database's (whose daylight-saving periods last days):
    # the hints are exact. A POSIX rule may give a period any length, which sampled offsets can miss
    # (one of 105 minutes lost 45 rows): no hint, the instant tested row by row (a sequential scan)
    indexed: bool = True

    @staticmethod
    def instant_sql(time_column: str) -> str:
        # a value within a day of Postgres' bounds has no instant in every zone: none, so the row is
        # quarantined as undated
        col = quote_ident(time_column)
        return f"CASE WHEN {col} {CONVERTIBLE_WALL_TIMES} OR NOT isfinite({col}) THEN {col}::timestamptz END"

    def range_hint_sql(self, low: str | None, upper: str) -> str:
        """Bounds on the wall time implied by ``event_timestamp`` in ``(low, upper]`` (SQL
        expressions of instants), for the index only: the exact test stays on the instant."""
        if not self.indexed:
            return "TRUE"
        wall = quote_ident(self.column)
        hint = f"{wall} <= {_wall_bound(upper, 'max')}"
        return hint if low is None else f"{wall} > {_wall_bound(low, 'min')} AND {hint}"

    def undated_hint_sql(self) -> str:
        """Where the rows without an instant (:meth:`instant_sql` NULL, infinite or past the horizon)
        are, for the index."""
        if not self.indexed:
            return "TRUE"
        wall = quote_ident(self.column)
        # the horizon (pipeline.source.window.LATEST) as a wall time, less two days for any zone's offset
        horizon = "(date_trunc('year', localtimestamp) + interval '2 years' - interval '2 days')"
        return f"({wall} IS NULL OR {wall} < '0001-01-02' OR {wall} > {horizon})"


def _wall_bound(instant: str, pick: str) -> str:
    """``instant``'s UTC wall time plus the least (``min``) or greatest (``max``) offset the session's
    zone has within a day of it, sampled hourly (a zone of the time zone database changes offset
    days apart): every wall time read as an instant on that side of ``instant`` is on that side."""
    at = f"(({instant})::timestamptz + make_interval(hours => h))"
    offsets = (f"(SELECT {pick}({at} AT TIME ZONE current_setting('TimeZone') - {at} AT TIME ZONE 'UTC') "
               "FROM generate_series(-24, 24) h)")
    return f"((({instant})::timestamptz AT TIME ZONE 'UTC') + {offsets})"


def own_name(name: str, id_column: str, time_column: str) -> str:
    """The table's own name of the canonical column ``name``."""
    return {ID: id_column, TIME: time_column}.get(name, name)
