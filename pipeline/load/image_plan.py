"""The image's planning policy: every table's window in one planner snapshot, so that each lake
snapshot is one image of the source across the tables.

One floor for the tables' windows (the oldest watermark), histories read in parts that end at one
bound, and a window that reached back taking the others with it: each rule keeps a transaction that
wrote rows in several tables read in all of them or in none. :class:`~pipeline.load.run.Loader`
plans through :func:`plan_image` and extracts and commits what it returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pipeline.lake import batches
from pipeline.lake.session import LakeTable
from pipeline.load.plan import plan_batch
from pipeline.settings import ResolvedSettings, TableSpec
from pipeline.source.plan import BatchPlan
from pipeline.source.snapshot import PlannerSnapshot


@dataclass(frozen=True)
class ImagePlan:
    """Each table's plan, in the order of the image's tables."""

    plans: list[BatchPlan]
    # each table's plan_batch(after, rows_behind): where its window started, and the rows it lacked
    starts: list[tuple[datetime | None, int]]
    marks: dict[str, datetime | None]  # each table's watermark before this image
    # the tables reading their history in parts, each with where its last part ended (None: none yet)
    catching: dict[str, datetime | None]


def plan_image(settings: ResolvedSettings, snapshot: PlannerSnapshot,
               tables: Sequence[tuple[TableSpec, LakeTable]], rows_behind: dict[str, int],
               planned_from: dict[str, datetime | None]) -> ImagePlan:
    """Every table's plan in ``snapshot`` (the caller holds the lake's reads in one transaction).
    ``rows_behind``: in a second image, the ids each table short of its check lacked (it reads its
    whole look-back again, from ``planned_from``: where its first plan started); empty in a first."""
    standing = {table.name: batches.standing(table) for _, table in tables}
    marks = {name: where.watermark for name, where in standing.items()}
    catching = _catching_up(settings, standing)
    # one floor for every table's window: the oldest watermark. A transaction that wrote a session and
    # its events is then read in both tables or in neither, even when one table is quieter and its
    # watermark behind (each table from its own watermark cut the look-back at two places, and an
    # image held the session without its events). A table never loaded reads its whole history; one
    # added to a loaded lake catches up from its own watermark in bounded batches, outside the floor
    # (it would hold the others back).
    floor = batches.image_floor(standing, catching)
    plans: list[BatchPlan] = []
    starts: list[tuple[datetime | None, int]] = []
    for spec, table in tables:
        behind = rows_behind.get(table.name, 0)
        if table.name in catching:  # its next part starts where the last one ended (whose rows may all
            # have been quarantined: the watermark did not move); None: the beginning
            start = max((m for m in (marks[table.name], catching[table.name]) if m is not None), default=None)
        else:  # the floor; a table never loaded reads its whole history
            start = floor if marks[table.name] is not None else None
        # a second image: a short table's whole look-back again, the others' next window
        after = planned_from.get(table.name) if behind else start
        starts.append((after, behind))
        plans.append(plan_batch(snapshot, table, settings, spec, after, rows_behind=behind,
                                bound_rows=settings.backfill_rows if table.name in catching else 0))
    _bound_together(settings, snapshot, tables, plans, starts, catching)
    _reach_back_together(settings, snapshot, tables, plans, starts, catching)
    return ImagePlan(plans, starts, marks, catching)


def _catching_up(settings: ResolvedSettings, standing: dict[str, batches.Standing]
                 ) -> dict[str, datetime | None]:
    """The tables reading their history in parts, each with where its last part ended (None: no part
    yet): never loaded (a first load, or a table added to a loaded lake), or whose last batch was a
    bounded part (BACKFILL_BATCH_ROWS; 0: a history is read whole)."""
    if not settings.backfill_rows:
        return {}
    return {table: where.catching_up for table, where in standing.items()
            if where.watermark is None or where.catching_up is not None}


def _bound_together(settings: ResolvedSettings, snapshot: PlannerSnapshot,
                    tables: Sequence[tuple[TableSpec, LakeTable]], plans: list[BatchPlan],
                    starts: list[tuple[datetime | None, int]], catching: dict[str, datetime | None]) -> None:
    """The histories read in this image end at one bound, the earliest of their parts' (each about
    BACKFILL_BATCH_ROWS rows): every snapshot of a first load holds every table up to the same
    instant (a small table read whole beside a large one's first part held sessions whose events
    were not loaded yet). A table already past the bound reads nothing new."""
    bounds = [plan.window.upper for (_, table), plan in zip(tables, plans, strict=True)
              if table.name in catching and plan.backfill]
    if not bounds:
        return
    bound = min(bounds)
    for i, (spec, table) in enumerate(tables):
        if table.name in catching and plans[i].window.upper > bound:
            after, behind = starts[i]
            plans[i] = plan_batch(snapshot, table, settings, spec, after, rows_behind=behind, bound_at=bound)


def _reach_back_together(settings: ResolvedSettings, snapshot: PlannerSnapshot,
                         tables: Sequence[tuple[TableSpec, LakeTable]], plans: list[BatchPlan],
                         starts: list[tuple[datetime | None, int]],
                         catching: dict[str, datetime | None]) -> None:
    """A table whose window reached back (rows a long transaction committed dated before the
    look-back) takes the image's other tables with it: each is planned again from there (a table
    without an arrival column reads that range whole), so the session such a transaction wrote is
    not loaded an image before its events. Tables reading their history in parts keep their part."""
    floors = [plan.window.low for (_, table), plan in zip(tables, plans, strict=True)
              if table.name not in catching and plan.window.low is not None]
    if not floors or min(floors) == max(floors):
        return
    reach = min(floors)
    for i, (spec, table) in enumerate(tables):
        low = plans[i].window.low
        if table.name in catching or low is None or low == reach:
            continue
        after, behind = starts[i]
        plans[i] = plan_batch(snapshot, table, settings, spec, after, rows_behind=behind, reach_back=reach)
