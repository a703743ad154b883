"""Pure planning of how to split a window's read: into time slices for Spark's tasks (the arrow
reader) or JDBC partitions, or into time chunks the driver fetches one at a time."""

from __future__ import annotations

import math
from datetime import datetime

from pipeline.source.window import Window

ROWS_PER_PARTITION = 500_000  # a slice streams: its memory is its Arrow batch, whatever its rows
DRIVER_CHUNK_ROWS = 250_000  # rows the driver holds at once with STAGING_WRITER=driver


def plan_partitions(rows: int, cores: int, *, rows_per_partition: int = ROWS_PER_PARTITION) -> int:
    """How many slices (Spark tasks) to read ``rows`` with on ``cores`` cores.

    Enough partitions to keep every core busy once the read is big enough to be worth
    splitting, and none so large that one task holds millions of rows; never more than
    4 per core (each is a Postgres connection and a staging file).
    """
    if rows <= 0:
        return 1
    by_size = math.ceil(rows / rows_per_partition)
    wanted = max(by_size, cores if rows >= 50_000 else 1)
    return max(1, min(wanted, 4 * max(cores, 1)))


def time_chunks(window: Window, rows: int, min_ts: datetime | None, max_ts: datetime | None,
                rows_per_chunk: int = ROWS_PER_PARTITION) -> list[Window]:
    """Split ``window`` into consecutive sub-windows ``(a, b]`` of about ``rows_per_chunk`` rows
    each (assuming rows spread evenly between ``min_ts`` and ``max_ts``). Adjacent chunks share
    their bound, so together they hold every row of the window exactly once (rows without a
    timestamp go with the first chunk)."""
    chunks = max(1, math.ceil(rows / rows_per_chunk))
    if chunks == 1 or min_ts is None or max_ts is None or min_ts >= max_ts:
        return [window]
    step = (max_ts - min_ts) / chunks
    edges = [window.low, *(min_ts + step * i for i in range(1, chunks)), window.upper]
    return [window.split(edges[i], edges[i + 1], window.nulls and i == 0)  # type: ignore[arg-type]
            for i in range(chunks)]


PAGE_RANGE_SHARE = 0.25  # a window holding at least this share of the table is read by pages


def page_ranges(window_rows: int, table_rows: int, table_pages: int, count: int, *, whole: bool = False
                ) -> list[tuple[int, int | None]]:
    """``count`` consecutive page ranges ``[first, next)`` covering the whole table (the last one
    open-ended, so pages added since the count are read too), when the window holds at least
    :data:`PAGE_RANGE_SHARE` of the table, or is ``whole`` (no lower bound: a first load, whose
    table may not be analyzed yet); else ``[]`` (slice by time instead).

    Why: time slices of a window that spans most of the table each make Postgres scan the
    table (or walk the time index over most of its pages), so N slices read it about N times;
    page ranges read each page once, like DuckDB's own parallel Postgres scan. Each slice still
    applies the window's predicate; all read one exported snapshot, in which tuples cannot move
    (moving them takes a lock the planner's open transaction blocks)."""
    if count <= 1 or table_pages < count:
        return []
    if not whole and (table_rows <= 0 or window_rows < PAGE_RANGE_SHARE * table_rows):
        return []
    step = math.ceil(table_pages / count)
    starts = list(range(0, table_pages, step))
    return [(start, starts[i + 1] if i + 1 < len(starts) else None) for i, start in enumerate(starts)]


def page_predicate(pages: tuple[int, int | None]) -> str:
    """The ``ctid`` condition of one page range (a TID range scan, Postgres 14 and newer)."""
    first, end = pages
    low = f"ctid >= '({first},0)'::tid"
    return f"{low} AND ctid < '({end},0)'::tid" if end is not None else low
