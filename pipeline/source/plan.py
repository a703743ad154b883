"""What a run's plan is (made once, in the planner's snapshot, by :mod:`pipeline.load.plan`):
the window, what the source holds in it, and the marks the next plan starts from. Extraction
reads with it and the manifest carries it; nothing after the plan decides these again."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pipeline.id_checksum import IdKind, IdSum
from pipeline.source.completeness import Completeness
from pipeline.source.shape import IdShape, SourceRelation
from pipeline.source.stats import WindowStats
from pipeline.source.window import Window


@dataclass(frozen=True)
class BatchPlan:
    source: SourceRelation  # the table as every reader reads it (its own id and time columns named)
    window: Window
    stats: WindowStats  # counted in the snapshot every reader imports
    snapshot_id: str | None  # the planner's exported Postgres snapshot (None: each reader's own)
    timezone: str = "UTC"  # the planner's session zone, which every reader's session takes
    rows_in_future: int = 0  # dated after the source's clock: they wait until due
    arrival_mark: datetime | None = None  # recorded with the batch; the next plan reads what arrived after
    snapshot_xmin: int | None = None  # recorded with the batch: the next plan reads newer transactions' rows
    # an arrival-aware window's completeness check (None: the window reads the whole look-back)
    completeness: Completeness | None = None
    rows_behind: int = 0  # rows found arrived behind the last mark: why this plan reads the whole look-back
    # the source's ids: uuid or text, unique or not (promotion checks every id against the whole lake)
    ids: IdShape = IdShape(kind=IdKind.UUID, unique=True)
    # which ids the source holds dated in the window's range, in the planner's snapshot: what the
    # lake must hold there once the batch is promoted (pipeline.load.proof); the commit records it
    source_ids: IdSum | None = None
    # the events table held no row in the window's range: a first load, or a part of a history (read
    # in order, each from where the last one ended): what it inserts is what the range holds
    lake_was_empty: bool = False
    lake_ids: IdSum | None = None  # the lake's side of the range as the plan read it (arrival-aware plans)
    backfill: bool = False  # a catch-up part: its upper bounded by rows, before the snapshot's instant
    # source_ids is summed by the readers from the rows they read (pipeline.extract.read_ids) and
    # recorded with the batch: a part of a history into an empty range, counted by its walk
    ids_read: bool = False

    @property
    def unique_ids(self) -> bool:
        return self.ids.unique
    # columns the source has beyond the five (schema drift) -> their lake types: read and loaded too
    extra_columns: dict[str, str] = field(default_factory=dict)
    # of those, the ones the source added with a default: the value older rows hold, as staged
    extra_defaults: dict[str, str] = field(default_factory=dict)
