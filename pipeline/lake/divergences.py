"""Divergences a check saw, kept until a repair or a later proof clears them.

A load's identity check, a part's proof or a reach-back that re-read rows whose contents changed
compares the lake with the source over the range it loaded, once: rows the source deleted, moved or
changed after they were loaded are a divergence no load repairs. ``--status`` compares only the
look-back behind the watermark, which moves on with the next load; so what a load saw is written
here, and ``--status`` says it (FAILING, with the range to repair) until a ``--repair`` over that
range, or a later exact proof of it, clears it.

The record lives in the catalog database beside DuckLake's tables (``event_lake_divergences`` in
the lake's metadata schema), as the job history does: a lake table would commit a snapshot per
record. It holds ranges, counts and a few ids, never a row's values.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime

from pipeline.lake.jobs import table_exists
from pipeline.lake.session import Lake, LakeTable
from pipeline.source.window import iso

log = logging.getLogger(__name__)

TABLE = "event_lake_divergences"
COLUMNS = ("table_name VARCHAR, low TIMESTAMPTZ, upper TIMESTAMPTZ, missing BIGINT, extra BIGINT, "
           "moved BIGINT, changed BIGINT, example_ids VARCHAR, seen_by VARCHAR, seen_at TIMESTAMPTZ, "
           "cleared_at TIMESTAMPTZ, cleared_by VARCHAR")


@dataclass(frozen=True)
class Divergence:
    """What one check saw differ in one table's range ``(low, upper]`` (low None: from the start)."""

    table: str
    low: datetime | None
    upper: datetime
    missing: int  # source ids the lake lacked there
    extra: int  # lake rows the source does not hold there (deleted, or moved out)
    moved: int  # ids the lake holds under another time
    changed: int  # rows whose contents the source changed after loading
    example_ids: list[str]
    seen_by: str
    seen_at: datetime

    def describe(self) -> str:
        kinds = [f"{count} {words}" for count, words in (
            (self.missing, "source row(s) the lake lacks"),
            (self.extra, "lake row(s) the source does not hold"),
            (self.moved, "row(s) the source moved in time"),
            (self.changed, "row(s) whose contents the source changed")) if count]
        examples = f" (e.g. {', '.join(self.example_ids[:3])})" if self.example_ids else ""
        return (f"the {self.seen_by} at {iso(self.seen_at)} saw {', '.join(kinds) or 'a difference'} in "
                f"({iso(self.low) if self.low else '-inf'}, {iso(self.upper)}]{examples}")

    def as_dict(self) -> dict[str, object]:
        return {"low": iso(self.low) if self.low else None, "upper": iso(self.upper), "missing": self.missing,
                "extra": self.extra, "moved": self.moved, "changed": self.changed,
                "example_ids": self.example_ids, "seen_by": self.seen_by, "seen_at": iso(self.seen_at)}


def _table(lake: Lake) -> str:
    return f"{lake.metadata()}.{TABLE}"


def record(lake: LakeTable, low: datetime | None, upper: datetime, *, missing: int = 0, extra: int = 0,
           moved: int = 0, changed: int = 0, example_ids: list[str] | None = None, seen_by: str) -> None:
    """Keep what a check saw differ in ``lake``'s table over ``(low, upper]``; once: what a kept
    divergence names already (each load's look-back sees it again) is not kept twice."""
    table = _table(lake.lake)
    shown = set(example_ids or [])
    if shown and any(shown <= set(kept.example_ids) for kept in unrepaired(lake)):
        return
    if not table_exists(lake.lake.con, table):
        with lake.lake.lock_lake("setup"):  # two first records at once: one creates, one waits
            if not table_exists(lake.lake.con, table):
                lake.lake.execute(f"CREATE TABLE {table} ({COLUMNS})")
    lake.lake.execute(f"INSERT INTO {table} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, now(), NULL, NULL)",
                      [lake.name, low, upper, missing, extra, moved, changed,
                       json.dumps((example_ids or [])[:10]), seen_by])
    log.warning("%s: kept until repaired — %s", lake.name,
                unrepaired(lake)[-1].describe())


def unrepaired(lake: LakeTable) -> list[Divergence]:
    """What checks saw differ in the table that no repair or later proof cleared, oldest first."""
    table = _table(lake.lake)
    if not table_exists(lake.lake.con, table):
        return []
    rows = lake.lake.execute(f"SELECT low, upper, missing, extra, moved, changed, example_ids, seen_by, "
                             f"seen_at FROM {table} WHERE table_name = ? AND cleared_at IS NULL "
                             "ORDER BY seen_at",
                             [lake.name]).fetchall()
    return [Divergence(lake.name, low, upper, int(missing), int(extra), int(moved), int(changed),
                       json.loads(examples or "[]"), seen_by, seen_at)
            for low, upper, missing, extra, moved, changed, examples, seen_by, seen_at in rows]


def clear(lake: LakeTable, low: datetime | None, upper: datetime, by: str) -> int:
    """Clear the divergences of the table inside ``(low, upper]``, which ``by`` proved exact (or
    repaired and proved). Returns how many."""
    table = _table(lake.lake)
    if not table_exists(lake.lake.con, table):
        return 0
    within = "upper <= ?" + ("" if low is None else " AND low IS NOT NULL AND low >= ?")
    params: list[object] = [by, lake.name, upper] + ([] if low is None else [low])
    cleared = lake.lake.execute(f"UPDATE {table} SET cleared_at = now(), cleared_by = ? WHERE table_name = ? "
                                f"AND cleared_at IS NULL AND {within}", params).fetchall()
    count = int(cleared[0][0]) if cleared else 0
    if count:
        log.info("%s: %d divergence(s) seen before cleared by %s", lake.name, count, by)
    return count
