"""``--reconcile``: find events that committed in the source later than the look-back and load them.

A run re-reads only ``LOOKBACK`` behind the watermark, so a row that becomes visible later than that
is never in a window. Reconcile compares source and lake hour by hour over ``--since`` by identity
(each hour's id count and checksum, :mod:`pipeline.id_checksum`: an index-bounded aggregate in
Postgres; then the id sets of the hours that differ: a deleted row and a backfilled one in one hour
leave its count equal, never its ids), stages the missing rows as one batch and promotes it through
the normal path: one snapshot, quarantine for bad rows, the commit message says it is a backfill.
Lake rows the source no longer has are counted and reported, never deleted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from pipeline import actions, id_checksum, staging
from pipeline.extract.batch import STAGED_COLUMNS
from pipeline.id_checksum import IdSum
from pipeline.lake import batches, validate
from pipeline.lake.attach_sql import SOURCE_ALIAS
from pipeline.lake.connect import lake_session
from pipeline.lake.identity import lake_id, table_names
from pipeline.lake.schema import column_types, ensure_tables
from pipeline.lake.session import Lake
from pipeline.promote.promotion import RECONCILE_ENGINE, promote
from pipeline.settings import ResolvedSettings
from pipeline.settings.durations import format_duration
from pipeline.source import stats
from pipeline.source.connect import connect as connect_source
from pipeline.source.shape import IdShape, SourceRelation
from pipeline.source.window import Window, iso
from pipeline.sqltext import one_row, quote_literal
from pipeline.storage.folder import Folder

log = logging.getLogger(__name__)
HOUR = timedelta(hours=1)
HOUR_SECONDS = 3600


@dataclass
class ReconcileReport:
    since: str
    low: str | None = None
    upper: str | None = None
    hours_compared: int = 0
    hours_differing: list[str] = field(default_factory=list)
    rows_backfilled: int = 0
    rows_quarantined: int = 0
    lake_rows_not_in_source: int = 0  # reported, never deleted
    lake_ids_doubled: int = 0  # lake rows beyond one per id in the compared hours: reported, never deleted
    snapshot_id: int | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        if self.upper is None:
            return "nothing loaded yet: nothing to reconcile"
        text = (f"compared {self.hours_compared} hour(s) in ({self.low or '-inf'}, {self.upper}]; "
                f"{len(self.hours_differing)} differed; backfilled {self.rows_backfilled} late row(s)")
        if self.snapshot_id is not None:
            text += f" in snapshot {self.snapshot_id}"
        if self.rows_quarantined:
            text += f", {self.rows_quarantined} quarantined"
        if self.lake_rows_not_in_source:
            text += (f"; {self.lake_rows_not_in_source} lake row(s) are no longer in the source "
                     "(kept; the lake never deletes on its own)")
        if self.lake_ids_doubled:
            text += (f"; {self.lake_ids_doubled} lake row(s) repeat an id another row holds (the source "
                     f"updated its event_timestamp after loading; kept, see {actions.VERIFY})")
        return text


ALL = "all"  # --since all: every row the source ever held, however old (0001-01-01 included)


def reconcile(resolved: ResolvedSettings, since: timedelta | str | None = None) -> ReconcileReport:
    """Compare source and lake over ``since`` before the watermark (default RECONCILE_SINCE;
    ``"all"``: the whole history), up to the start of the look-back, and backfill what the lake
    lacks. The look-back itself is every load's business: each one re-reads it (or checks it is
    complete), so a reconcile there would race the next load for rows still arriving and report
    them as late events beyond the look-back. A lake table dropped by hand is created again here
    (only here: a run stops instead), so ``--since all`` reloads it."""
    if since is None:
        since = resolved.intervals.reconcile_since or ALL
    if isinstance(since, str) and since != ALL:
        raise ValueError(f"since: a timedelta or {ALL!r}, not {since!r}")
    report = ReconcileReport(since=format_duration(since) if isinstance(since, timedelta) else ALL)
    started = time.monotonic()
    with lake_session(resolved, source=True) as lake:  # the source attached as src, for backfills
        # a table dropped by hand is made again empty: then the look-back is reloaded here too
        dropped = ("main", lake.table) not in table_names(lake)
        ensure_tables(lake, column_types(resolved.promotion, resolved.spark.reader), recreate_dropped=True)
        watermark = batches.watermark(lake)
        if watermark is None:
            return report
        upper = watermark if dropped else watermark - resolved.lookback
        low = watermark - since if isinstance(since, timedelta) else None
        if low is not None and low >= upper:
            return report  # RECONCILE_SINCE within the look-back: the loads cover it all
        report.low, report.upper = iso(low) if low else None, iso(upper)
        source_ids = _source_hours(resolved, low, upper)
        lake_ids = batches.id_sums(lake, low, upper, HOUR_SECONDS)
        report.hours_compared = len(source_ids.keys() | lake_ids.keys())
        report.lake_ids_doubled = _doubled(lake, low, upper)
        hours = [id_checksum.bucket_start(h, HOUR_SECONDS)
                 for h in id_checksum.differing(source_ids, lake_ids)]
        report.hours_differing = [iso(h) for h in hours]
        if hours:
            with connect_source(resolved.source_dsn) as conn:
                source = Source(SourceRelation.of(conn, resolved), resolved.source_name)
            _backfill(lake, source, staging.table_dir(resolved), hours,
                      Window(low=low, upper=upper, nulls=False), report)
    report.seconds = round(time.monotonic() - started, 3)
    log.info("reconcile: %s", report.summary())
    return report


@dataclass(frozen=True)
class Source:
    """The source table a backfill reads, and its name as a batch records it."""

    table: SourceRelation
    name: str  # database.schema.table (no credentials)


def _source_hours(settings: ResolvedSettings, low: datetime | None, upper: datetime) -> dict[int, IdSum]:
    """Which ids the source table holds per UTC hour (an index-bounded aggregate in Postgres)."""
    with connect_source(settings.source_dsn) as conn:
        stats.require_table(conn, settings.source_table)
        table = SourceRelation.of(conn, settings)
        how = IdShape.read(conn, table)
        return stats.id_sums(conn, table, low, upper, uuid_typed=how.uuid_typed,
                             unique=how.unique, bucket_seconds=HOUR_SECONDS)


def _doubled(lake: Lake, low: datetime | None,
             upper: datetime) -> int:
    """Lake rows beyond one per id in the compared range (a hour holding them differs by id too)."""
    return int(one_row(lake.execute(
        f"SELECT count(*) - count(DISTINCT event_id) FROM {lake.rows} "
        "WHERE ($low IS NULL OR event_timestamp > $low) AND event_timestamp <= $upper",
        {"low": low, "upper": upper}))[0])


def _backfill(lake: Lake, source: Source, staged: Folder, hours: list[datetime], window: Window,
              report: ReconcileReport) -> None:
    """Stage the rows of ``hours`` the lake lacks as one batch in ``staged``, and promote it."""
    ranges = " OR ".join(f"(event_timestamp >= '{iso(h)}'::timestamptz AND event_timestamp < "
                         f"'{iso(h + HOUR)}'::timestamptz)" for h in hours)
    columns = ", ".join(f"{expr} AS {name}" for name, expr in STAGED_COLUMNS.items())
    # the query runs in Postgres (index range scans over the differing hours only); its rows
    # are held once in DuckDB for both comparisons
    source_query = (f"SELECT {columns} FROM {source.table.sql} "
                    f"WHERE ({ranges}) AND {window.literal_sql()}")
    con = lake.con
    con.execute("CREATE OR REPLACE TEMP TABLE reconcile_source AS " + validate.validated_sql(
        f"postgres_query('{SOURCE_ALIAS}', {quote_literal(source_query)})"))
    hour_list = ", ".join(f"{quote_literal(iso(h))}::TIMESTAMPTZ" for h in hours)
    # a zero-copy lake holds ids as text: compared as UUIDs like the validated source rows
    lake_ids = (f"SELECT TRY_CAST(event_id AS UUID) AS event_id FROM {lake.rows} "
                f"WHERE {window.literal_sql()} AND date_trunc('hour', event_timestamp) IN ({hour_list})")
    report.lake_rows_not_in_source = one_row(con.execute(
        f"SELECT count(*) FROM ({lake_ids}) l WHERE l.event_id NOT IN "
        "(SELECT event_id FROM reconcile_source WHERE event_id IS NOT NULL)"))[0]

    batch_id = staging.new_batch_id()
    folder = staging.batch_dir(staged, batch_id)
    folder.make(exist_ok=False)
    name = "part-00000.parquet"
    missing = one_row(con.execute(
        "COPY (SELECT raw_event_id AS event_id, event_type, event_timestamp, raw_details AS details, "
        f"created_at FROM reconcile_source WHERE reason IS NULL AND event_id NOT IN ({lake_ids})) "
        f"TO {quote_literal(folder.uri(name))} (FORMAT parquet)"))[0]
    con.execute("DROP TABLE reconcile_source")
    if missing == 0:
        staging.remove_batch(folder)
        return
    batch = staging.seal(folder, batch_id=batch_id, table=lake.table, engine=RECONCILE_ENGINE,
                         window=window, row_count=missing, files=[name],
                         lake_id=lake_id(lake), source=source.name, id_column=lake.id_column,
                         time_column=lake.time_column, absent=list(source.table.absent) or None,
                         # checked against every lake row: a source without a unique event_id may
                         # hold, in these hours, an id the lake has under another time (reconcile is rare)
                         ids_unique=False)
    result = promote(lake, batch)
    report.rows_backfilled, report.rows_quarantined = result.rows_inserted, result.rows_quarantined
    report.snapshot_id = result.snapshot_id
