"""Pure planning of how to split a window's read: across Spark tasks, or into time chunks the
driver fetches one at a time."""

from __future__ import annotations

import math
from datetime import datetime

from pipeline.source.window import Window

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
    return [Window(low=edges[i], upper=edges[i + 1], nulls=window.nulls and i == 0)  # type: ignore[arg-type]
            for i in range(chunks)]
