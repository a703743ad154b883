"""Pure planning of how to split a window's read across Spark tasks."""

from __future__ import annotations

import math

ROWS_PER_PARTITION = 250_000
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
