"""Making a run's plan (:class:`pipeline.source.plan.BatchPlan`), once, inside the planner's
snapshot: the window, what the source holds in it, and the marks the next plan starts from.
Everything after (extraction, promotion) only carries it out."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

import psycopg

from pipeline import id_checksum
from pipeline.id_checksum import IdKind
from pipeline.lake import batches
from pipeline.lake.session import LakeTable
from pipeline.load import proof
from pipeline.promote import schema_changes
from pipeline.settings import ResolvedSettings, TableSpec
from pipeline.source import arrivals, shape, stats
from pipeline.source.completeness import Completeness
from pipeline.source.plan import BatchPlan
from pipeline.source.snapshot import PlannerSnapshot
from pipeline.source.window import LATEST, XID_SPAN, Arrivals, Window, iso, plan_window

log = logging.getLogger(__name__)


def plan_batch(snapshot: PlannerSnapshot, lake: LakeTable, settings: ResolvedSettings, table: TableSpec,
               watermark: datetime | None, *, rows_behind: int = 0, bound_rows: int = 0,
               bound_at: datetime | None = None, reach_back: datetime | None = None) -> BatchPlan:
    """``table``'s next window after ``watermark`` (read in the lake session ``lake``), counted in the
    planner's ``snapshot``. With an arrival column and an earlier batch's mark, the window holds
    only what arrived or became due since (see :mod:`pipeline.source.window`), and the completeness
    check (:mod:`pipeline.source.completeness`) decides whether that is enough. ``rows_behind``:
    a run's second pass, after its first one's promotion came up that many rows short: the whole
    look-back is read. ``bound_rows``: a table catching up (SOURCE_TABLES) reads about that many
    rows, its window ending at the time of the last of them (``backfill``) when it has more;
    ``bound_at``: its window ends there (the image's other histories' common bound).
    ``reach_back``: where another table of the image reached back to (:func:`_reach_back`): the
    window starts there too, so a transaction's rows in both tables are read together."""
    conn = snapshot.conn
    source = shape.SourceRelation.of(conn, table)
    # the columns this snapshot has: a column added while a follower runs is loaded from its next plan
    contract = settings.schema_changes_of(table.qualified)
    followed = schema_changes.PlanCheck.read(lake, source, contract)  # the lake read at most once
    extra_columns = shape.check_shape(conn, source, contract, settings.arrival_column, followed.kept_names())
    followed.refuse(contract)
    arrival_column = shape.arrival_column_of(source, settings.arrival_column)
    upper = stats.server_now(conn)
    mark = snapshot.arrival_mark  # None without an arrival column
    ids = proof.key_shape(conn, lake, source)
    since = None if rows_behind else _arrivals(snapshot, lake, source, arrival_column, ids.unique)
    window = plan_window(watermark, settings.lookback, upper, since)
    backfill, rest, walked = False, False, None
    if bound_rows or bound_at is not None:
        if bound_at is None:  # the rows after the watermark: the last part read the look-back before it
            walked = snapshot.ends.end(conn, source, watermark, upper, bound_rows)
            # a history no longer than a part, never loaded, is read whole in the window a table never
            # loaded reads, as no part, counted by the walk. The rest after parts is read as any window,
            # its look-back re-read: rows written behind the last part's bound while the parts loaded
            # are read there (read from the watermark, without it, they were lost for good, the load
            # and --status saying nothing — found by the adversary)
            rest = walked.rest and watermark is None
        bounded = bound_at if bound_at is not None else walked.at if walked else None
        if bounded is not None and bounded < upper:
            # from where the last part ended, without the look-back: re-read behind every part, a history
            # whose rows lie within one look-back was read again whole by each (rows committed behind a
            # part meanwhile are found through the arrival column, else by --reconcile, and behind the
            # last one by the rest's look-back)
            window, backfill = plan_window(watermark, timedelta(0), bounded, since), True
    window = replace(window, wall_clock=source.wall_clock)
    # what arrived since the last plan, whatever the window reads (a source whose id is not unique
    # reads its whole look-back, and still reaches back to rows a long transaction committed)
    probe = since if since is not None or ids.unique or rows_behind else \
        _arrivals(snapshot, lake, source, arrival_column, unique_ids=True)
    if probe is not None and window.low is not None:
        window = _reach_back(conn, source, probe, window)
    if reach_back is not None and window.low is not None and reach_back < window.low:
        window = replace(window, low=reach_back)
    in_future = stats.rows_after(conn, source, upper)
    if in_future:
        log.warning("%d events are dated after the source's clock (%s): they are loaded when due, but "
                    "for those whose transaction wrote rows this image reads (read with them)", in_future,
                    upper.isoformat())
    # a part (or a history's rest) the walk counted, and nothing moved its range since: only its
    # undated rows are counted
    counted = (walked is not None and (backfill or rest)
               and (window.low, window.upper) == (watermark, walked.at))
    dated = walked.rows if walked is not None and counted else None
    window_stats = (stats.window_stats(conn, source, window) if dated is None
                    else stats.part_stats(conn, source, window, dated))
    lake_was_empty = batches.holds_no_row(lake, after=window.low) if watermark is None or backfill else False
    # what the lake must hold in the window's range once this batch is in: checked after promotion.
    # A part of a history into an empty range has it summed by the readers from the rows they read
    # (pipeline.extract.read_ids), the walk's count keeping them honest: no scan of its own
    ids_read = dated is not None and lake_was_empty and ids.kind is IdKind.UUID and ids.unique
    source_ids = None if ids_read else proof.source_ids(conn, source, window.low, window.upper, ids)
    check, lake_ids = None, None
    if window.arrivals is not None and window.low is not None:
        _warn_rows_ahead(snapshot, source.qualified, arrival_column, upper)
        # a count first, before extracting: rows that arrived behind the mark are read at once
        # (the identity check after promotion decides; this only saves a second pass)
        side = proof.lake_side(conn, lake, source, window.low, window.upper, ids)
        # the lake's side as it is now: an empty window leaves it so, and the check needs no other read
        lake_ids = side.held
        check = Completeness(source_rows=source_ids.count if source_ids else window_stats.rows,
                             lake_rows=side.rows,
                             window_rows=window_stats.rows)
        if check.behind:
            rows_behind = check.behind
            window = replace(window, arrivals=None)
            window_stats = stats.window_stats(conn, source, window)
    if rows_behind:
        _warn_behind(arrival_column, rows_behind, window)
    return BatchPlan(source=source, window=window, stats=window_stats, snapshot_id=snapshot.snapshot_id,
                     timezone=stats.session_timezone(conn), rows_in_future=in_future, arrival_mark=mark,
                     snapshot_xmin=snapshot.xmin,
                     completeness=check if window.arrivals is not None else None, rows_behind=rows_behind,
                     ids=ids, source_ids=source_ids, lake_ids=lake_ids, extra_columns=extra_columns,
                     extra_defaults=shape.values_before(conn, source, extra_columns),
                     lake_was_empty=lake_was_empty, backfill=backfill, ids_read=ids_read)


# at most this many rows dated after the instant are looked at for transactions a window reads part
# of (an index range scan); a transaction with more is loaded as its rows come due, and said so
PULL_LIMIT = 10_000


def whole_transactions(snapshot: PlannerSnapshot, lakes: list[LakeTable],
                       plans: list[BatchPlan]) -> list[BatchPlan]:
    """``plans`` (one per table of the image, in ``lakes``' order) reading, beside their windows, the
    rows dated after the instant (an application clock ahead of the database's, an event scheduled
    ahead) whose transaction wrote rows some window of the image reads: a transaction enters the
    lake in one image, not its past rows now and the rest when due. Rows of a transaction are told
    by its id (``xmin``); a savepoint's rows carry their subtransaction's own, so those still come
    when due. A catching-up table's part ends before the instant, and is left as planned."""
    conn = snapshot.conn
    future = {i: stats.future_rows(conn, plan.source, plan.window.upper, id_kind=plan.ids.kind,
                                   limit=PULL_LIMIT + 1)
              for i, plan in enumerate(plans) if plan.rows_in_future and not plan.backfill}
    xids = {xid for rows in future.values() for xid in rows}
    if not xids:
        return plans
    if sum(len(ids) for rows in future.values() for ids in rows.values()) > PULL_LIMIT:
        log.warning("more than %d rows are dated after the source's clock: they are loaded when due, and a "
                    "transaction that also wrote rows dated before it can enter the lake in two images",
                    PULL_LIMIT)
        return plans
    read = set().union(*(stats.transactions_in(conn, plan.source, plan.window, xids)
                         for plan in plans if plan.stats.rows and not plan.backfill))
    pulled = list(plans)
    for i, rows in future.items():
        ids = {identity for xid, identities in rows.items() if xid in read for identity in identities}
        # a row pulled by an earlier load whose transaction's rows this window reads again
        ids -= batches.held_ids(lakes[i], ids, kind=plans[i].ids.kind)
        if not ids:
            continue
        plan, kind = plans[i], plans[i].ids.kind
        among = id_checksum.postgres_among("event_id", kind, id_checksum.among_literal(ids, kind))
        rows_sql = (f"event_timestamp > '{iso(plan.window.upper)}'::timestamptz "
                    f"AND event_timestamp < {LATEST} AND {among}")
        window = replace(plan.window, pulled=rows_sql)
        log.info("%s: %d row(s) dated after the source's clock are read with the rest of their transactions",
                 plan.source.qualified, len(ids))
        pulled[i] = replace(plan, window=window, stats=stats.window_stats(conn, plan.source, window),
                            rows_in_future=plan.rows_in_future - len(ids))
    return pulled


def _arrivals(snapshot: PlannerSnapshot, lake: LakeTable, table: shape.SourceRelation, column: str | None,
              unique_ids: bool) -> Arrivals | None:
    """What the last plan saw, for a window that reads only what arrived since; None where the
    fast path cannot be used: no arrival column or mark, no earlier mark, or a source whose
    id is not unique (a count could not vouch for it: the whole look-back is read)."""
    if column is None or snapshot.arrival_mark is None:
        return None
    earlier = batches.last_arrivals(lake)
    if earlier is None:
        return None
    if not unique_ids:
        log.debug("reading the whole look-back: %s has no unique index on %s", table.qualified,
                  table.id_column)
        return None
    after, due_after, xmin, filenode = earlier
    # transaction ids decide what is new when the relation has them (a table, not a view or a
    # foreign table) and the earlier snapshot is well within the 2**31 window 32-bit ids compare in
    if xmin is not None and (snapshot.xmin is None or not 0 <= snapshot.xmin - xmin < XID_SPAN // 4
                             or not table.row_versions):
        xmin = None
    if xmin is not None and filenode is not None and filenode != table.filenode:
        # rewritten since (ALTER … TYPE, VACUUM FULL, CLUSTER): every row has a new xmin, and would
        # read as new where its arrival time is within SKEW_BOUND of the mark; the clock decides once
        log.info("%s was rewritten since the last load (its storage changed): rows that arrived are "
                 "told by their %s alone this once", table.qualified, column)
        xmin = None
    return Arrivals(column, after, due_after, xmin)


def _reach_back(conn: psycopg.Connection, source: shape.SourceRelation, since: Arrivals,
                window: Window) -> Window:
    """``window`` reaching back to the rows that arrived since the last plan dated before it: a
    transaction open longer than LOOKBACK (or prepared, or a writer's backfill in one) committed them,
    and no window's dates would ever take them (they waited for the daily --reconcile while --status
    said healthy). Its range, and so the identity check, then covers them."""
    assert window.low is not None
    late, earliest = stats.arrived_behind(conn, source, since, window.low)
    if not late or earliest is None:
        return window
    log.warning("%d row(s) dated before the look-back (from %s) were committed since the last load (a "
                "transaction open longer than LOOKBACK, or a backfill): this load reads back to them",
                late, earliest.isoformat())
    try:
        return replace(window, low=earliest - timedelta(microseconds=1))
    except OverflowError:  # 0001-01-01 00:00 UTC, the first instant a range holds: all of them
        return replace(window, low=None)


def _warn_rows_ahead(snapshot: PlannerSnapshot, table: str, column: str | None, upper: datetime) -> None:
    if column is None:
        return
    ahead, latest = arrivals.rows_ahead(snapshot.conn, table, column, upper)
    if ahead and latest is not None:
        log.warning("%d rows have %s after the source's clock (latest %s, %.1fs ahead): their writer sets %s "
                    "from its own clock, which runs ahead of the database's. They are read; every run "
                    "checks that no row is missed whatever %s says", ahead, column, latest.isoformat(),
                    (latest - upper).total_seconds(), column, column)


def _warn_behind(column: str | None, rows: int, window: Window) -> None:
    log.warning("%d row(s) dated inside the look-back arrived with %s at or before the last load's arrival "
                "mark (a writer's clock behind the database's, a backfill or replay, or a %s the application "
                "sets): reading the whole look-back %s so none is missed", rows, column, column,
                window.describe())
