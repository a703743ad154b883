"""What a run's plan is (made once, in the planner's snapshot, by :mod:`pipeline.ops.plan`):
the window, what the source holds in it, and the marks the next plan starts from. Extraction
reads with it and the manifest carries it; nothing after the plan decides these again."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pipeline.source.completeness import Completeness
from pipeline.source.stats import WindowStats
from pipeline.source.window import Window


@dataclass(frozen=True)
class BatchPlan:
    window: Window
    stats: WindowStats  # counted in the snapshot every reader imports
    snapshot_id: str | None  # the planner's exported Postgres snapshot (None: each reader's own)
    timezone: str = "UTC"  # the planner's session zone, which every reader's session takes
    rows_in_future: int = 0  # dated after the source's clock: they wait until due
    arrival_mark: datetime | None = None  # recorded with the batch; the next plan reads what arrived after
    # an arrival-aware window's completeness check (None: the window reads the whole look-back)
    completeness: Completeness | None = None
    rows_behind: int = 0  # rows found arrived behind the last mark: why this plan reads the whole look-back
    # the source has a unique index on event_id; without one an id may come back in a later batch
    # with another event_timestamp, so promotion checks it against every lake row, not the batch's range
    unique_ids: bool = True
    # columns the source has beyond the five (schema drift) -> their lake types: read and loaded too
    extra_columns: dict[str, str] = field(default_factory=dict)
