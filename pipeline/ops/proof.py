"""The identity check: does the lake hold exactly the source's ids dated in a range?

Both sides are summarised as (count, id checksum) (:mod:`pipeline.id_checksum`); equal sums end
the check in one aggregate per side. When they differ, the range is compared minute by minute
(hour by hour for ``--reconcile``) and, in the buckets that differ, id by id: the ids the lake
lacks (a load must read them), and the lake rows the source no longer has there or holds twice
(deleted or moved in the source after loading: reported, never hidden).

The lake holds a row when its events table does, or when it was set aside for its details
(``ops.quarantine``) and the source still has it as it was: a row the source fixed is missing
until a load reads it again. Rows without a valid id or time have no identity and take no part.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

import duckdb
import psycopg

from pipeline import id_checksum
from pipeline.id_checksum import IdSum
from pipeline.lake import batches
from pipeline.settings import Settings
from pipeline.source import stats
from pipeline.source.shape import IdShape
from pipeline.source.window import iso

log = logging.getLogger(__name__)
MINUTE = 60
HOUR = 3600
SHOWN = 5  # ids named in a message


@dataclass(frozen=True)
class RangeCheck:
    """The outcome of one comparison over ``(low, upper]``."""

    low: datetime | None
    upper: datetime
    source: IdSum
    lake: IdSum
    missing: list[UUID] = field(default_factory=list)  # source ids the lake lacks
    extra: list[UUID] = field(default_factory=list)  # lake rows beyond the source's, one per surplus row
    moved: list[UUID] = field(default_factory=list)  # source ids in range the lake holds dated elsewhere

    @property
    def exact(self) -> bool:
        return self.source == self.lake

    @property
    def diverged(self) -> int:
        """Rows the source changed after loading (deleted, or moved in time): the lake keeps them."""
        return len(self.extra) + len(self.moved)

    def describe(self) -> str:
        span = f"({iso(self.low) if self.low else '-inf'}, {iso(self.upper)}]"
        if self.exact:
            return f"lake == source by id in {span}: {self.source.count} id(s)"
        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} source id(s) not in the lake (e.g. {_ids(self.missing)})")
        if self.moved:
            parts.append(f"{len(self.moved)} id(s) the source dates here and the lake holds under another "
                         f"event_timestamp (e.g. {_ids(self.moved)})")
        if self.extra:
            parts.append(f"{len(self.extra)} lake row(s) the source does not hold there (deleted or moved "
                         f"after loading, or an id held twice; e.g. {_ids(self.extra)})")
        return f"lake differs from source by id in {span}: " + ("; ".join(parts) or "checksums differ")

    def as_dict(self) -> dict[str, object]:
        return {"low": iso(self.low) if self.low else None, "upper": iso(self.upper),
                "source": self.source.as_dict(), "lake": self.lake.as_dict(), "exact": self.exact,
                "missing": len(self.missing), "extra": len(self.extra), "moved": len(self.moved),
                "missing_ids": [str(i) for i in self.missing[:SHOWN]],
                "extra_ids": [str(i) for i in self.extra[:SHOWN]]}


def _ids(ids: list[UUID]) -> str:
    return ", ".join(map(str, ids[:SHOWN])) + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "")


def source_ids(conn: psycopg.Connection, settings: Settings, low: datetime | None, upper: datetime,
               how: IdShape) -> IdSum:
    """The source's side over ``(low, upper]``, in ``conn``'s snapshot (a plan records it)."""
    sums = stats.id_sums(conn, settings.source_table, low, upper, uuid_typed=how.uuid_typed,
                         unique=how.unique)
    return sums.get(0, IdSum())


def compare(conn: psycopg.Connection, con: duckdb.DuckDBPyConnection, settings: Settings,
            low: datetime | None, upper: datetime, how: IdShape, *, source: IdSum | None = None,
            bucket_seconds: int = MINUTE) -> RangeCheck:
    """Compare the lake (``con``) with the source (``conn``, whose snapshot ``source`` was read in
    when given) over ``(low, upper]``; locate the difference id by id when there is one."""
    table = settings.source_table
    if source is None:
        source = source_ids(conn, settings, low, upper, how)
    set_aside = batches.quarantined_in_range(con, settings, low, upper)
    kept = stats.unchanged_rows(conn, table, set_aside, uuid_typed=how.uuid_typed)
    lake = batches.id_sums(con, settings, low, upper).get(0, IdSum()) + id_checksum.of_ids(kept)
    if lake == source:
        return RangeCheck(low, upper, source, lake)
    by_source = stats.id_sums(conn, table, low, upper, uuid_typed=how.uuid_typed, unique=how.unique,
                              bucket_seconds=bucket_seconds)
    by_lake = batches.id_sums(con, settings, low, upper, bucket_seconds)
    # buckets holding a kept quarantined row differ too (the events table lacks it): its id is
    # found with the others and counted as held
    differing = id_checksum.differing(by_source, by_lake)
    source_set = stats.ids_in_buckets(conn, table, low, upper, differing, bucket_seconds,
                                      uuid_typed=how.uuid_typed) if differing else set()
    lake_rows = (batches.ids_in_buckets(con, settings, low, upper, differing, bucket_seconds)
                 if differing else Counter())
    absent = source_set - set(lake_rows) - kept
    moved = batches.held_ids(con, settings, absent)  # each id once in the lake: not loaded again
    missing = sorted(absent - moved)
    extra = sorted([i for i in lake_rows if i not in source_set]
                   + [i for i, n in lake_rows.items() for _ in range(n - 1)])
    return RangeCheck(low, upper, source, lake, missing, extra, sorted(moved))
