"""Known since: the snapshot, and its time, at which the lake first held each row — beside the
row's own event time, so "how late did events arrive" is one query (``lake.known.<table>``).

DuckLake keeps, for every row, the snapshot that wrote it (its virtual ``snapshot_id`` column),
through the maintenance this pipeline runs: inlined rows flushed to files and adjacent files merged
keep it. A rewrite does not: an UPDATE writes the row again with the UPDATE's snapshot (a payload
key typed later fills its column in every row, :mod:`pipeline.load.payload_typing`; an erasure
moves every other row of the files it deleted rows from, :mod:`pipeline.erase.erasure`, by an UPDATE
too, as DuckLake's own rewrite of such files would lose the snapshot as well). Each such UPDATE
copies the row's snapshot into :data:`COLUMN` (``coalesce``: a row rewritten twice keeps the
first), so the view reads ``coalesce(COLUMN, snapshot_id)``: the row's first snapshot, whatever
rewrote it since.

Its time: the snapshot's own time while DuckLake keeps the snapshot, and once maintenance has
expired it, the time ``ops.batches`` recorded for the load that committed in it (ops rows are
never rewritten, so their own ``snapshot_id`` is that commit). A row from a snapshot that is both
expired and no load's (a repair's, a reconcile's) has its snapshot but no time.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.lake.session import LakeTable
from pipeline.sqltext import quote_ident

COLUMN = "_el_known_snapshot"  # a row's first snapshot, set only where a rewrite moved its own
SCHEMA = "known"  # lake.known.<table>: the table with known_snapshot, known_since, lateness


def column_sql() -> str:
    """The column in CREATE TABLE (after the table's own columns)."""
    return f",\n    {quote_ident(COLUMN)} BIGINT"


def kept_sql() -> str:
    """``SET`` item of a rewrite: the row's first snapshot kept before the rewrite moves its own."""
    column = quote_ident(COLUMN)
    return f"{column} = coalesce({column}, snapshot_id)"


# DuckLake's virtual columns this reads: a table column of the same name hides them (a source table
# of its own columns may have one), and the view's own columns
VIRTUAL = ("snapshot_id", "rowid", "filename")
VIEW_COLUMNS = ("known_snapshot", "known_since", "lateness", "_el_first")


def has_column(columns: Iterable[str]) -> bool:
    """Does a table of ``columns`` (names) keep its rows' first snapshots? Not one whose own columns
    hide DuckLake's per-row snapshot (its ``known`` view is not made either)."""
    names = {name.lower() for name in columns}
    return COLUMN.lower() in names and not names & set(VIRTUAL)


def view_possible(columns: Iterable[str]) -> str | None:
    """Why a table of ``columns`` has no ``known`` view (None: it has one): a column of its own named
    as DuckLake's per-row snapshot, or as one of the view's columns."""
    clashes = sorted({name for name in columns if name.lower() in {*VIRTUAL, *VIEW_COLUMNS}})
    return (f"its own column(s) {', '.join(clashes)} hide DuckLake's per-row snapshot or the view's columns"
            if clashes else None)


def view_name(table: LakeTable) -> str:
    return f"{quote_ident(table.lake.name)}.{quote_ident(SCHEMA)}.{quote_ident(table.name)}"


def view_sql(table: LakeTable) -> list[str]:
    """The statements making ``lake.known.<table>``: every column of the table (but :data:`COLUMN`),
    then ``known_snapshot``, ``known_since`` and ``lateness`` (known_since minus the table's time
    column). Its body names the lake's own schemas only (``main``, the ops schema, ``snapshots()``
    unqualified), so it binds in whatever name the lake is attached under."""
    column, time = quote_ident(COLUMN), quote_ident(table.time_column)
    batches = f"{quote_ident(table.lake.ops_schema)}.batches"
    return [
        f"CREATE SCHEMA IF NOT EXISTS {quote_ident(table.lake.name)}.{quote_ident(SCHEMA)}",
        f"""CREATE OR REPLACE VIEW {view_name(table)} AS
SELECT e.* EXCLUDE ({column}, _el_first), e._el_first AS known_snapshot, k.known_since,
       k.known_since - e.{time} AS lateness
FROM (SELECT *, coalesce({column}, snapshot_id) AS _el_first FROM main.{quote_ident(table.name)}) e
LEFT JOIN (
    SELECT snapshot_id, snapshot_time AS known_since FROM snapshots()
    UNION ALL
    SELECT snapshot_id, max(promoted_at) FROM {batches}
    WHERE snapshot_id NOT IN (SELECT snapshot_id FROM snapshots()) GROUP BY snapshot_id
) k ON k.snapshot_id = e._el_first""",
    ]
