"""Making a run's plan (:class:`pipeline.source.plan.BatchPlan`), once, inside the planner's
snapshot: the window, what the source holds in it, and the marks the next plan starts from.
Everything after (extraction, promotion) only carries it out."""

from __future__ import annotations

import logging
from datetime import datetime

import duckdb

from pipeline import invocation
from pipeline.lake import batches
from pipeline.settings import ResolvedSettings
from pipeline.source import arrivals, stats
from pipeline.source.plan import BatchPlan
from pipeline.source.snapshot import PlannerSnapshot
from pipeline.source.window import Arrivals, plan_window

log = logging.getLogger(__name__)


def plan_batch(snapshot: PlannerSnapshot, con: duckdb.DuckDBPyConnection, settings: ResolvedSettings,
               watermark: datetime | None) -> BatchPlan:
    """The next window after ``watermark`` (read in the lake session ``con``), counted in the
    planner's ``snapshot``. With an arrival column and an earlier batch's mark, the window holds
    only what arrived or became due since (see :mod:`pipeline.source.window`)."""
    conn = snapshot.conn
    upper = stats.server_now(conn)
    column = settings.arrival_column
    mark = snapshot.arrival_mark  # None without an arrival column
    earlier = batches.last_arrivals(con, settings) if mark is not None else None
    window = plan_window(watermark, settings.lookback, upper,
                         Arrivals(column, *earlier) if column and earlier else None)
    in_future = stats.rows_after(conn, settings.source_table, upper)
    if in_future:
        log.warning("%d events are dated after the source's clock (%s); they are loaded when "
                    "due, never ahead of it", in_future, upper.isoformat())
    if column and mark is not None:
        ahead, latest = arrivals.rows_ahead(conn, settings.source_table, column, upper)
        if ahead:
            log.warning("%d rows have %s after the source's clock (latest %s, %.1fs ahead): their writer "
                        "sets %s from a clock that runs ahead of the database's. They are read; a writer "
                        "clock running behind by more than %.1fs could make a load miss rows, which the "
                        f"scheduled {invocation.RECONCILE} finds", ahead, column, latest.isoformat(),
                        (latest - upper).total_seconds(), column, arrivals.SKEW_MARGIN.total_seconds())
    return BatchPlan(window=window, stats=stats.window_stats(conn, settings.source_table, window),
                     snapshot_id=snapshot.snapshot_id, timezone=stats.session_timezone(conn),
                     rows_in_future=in_future, arrival_mark=mark)
