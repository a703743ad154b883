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
from pipeline.id_checksum import IdKind, duckdb_identity, duckdb_key
from pipeline.lake import batches, tombstones, validate
from pipeline.lake.attach_sql import SOURCE_ALIAS
from pipeline.lake.connect import lake_session
from pipeline.lake.identity import lake_id, table_names
from pipeline.lake.schema import column_types, ensure_tables
from pipeline.lake.session import Lake, LakeTable
from pipeline.load import proof
from pipeline.load.preflight import refuse_tearing_an_image
from pipeline.promote.promotion import RECONCILE_ENGINE, PromotionResult, promote_together
from pipeline.settings import ResolvedSettings, TableSpec
from pipeline.settings.durations import format_duration
from pipeline.source import shape, stats
from pipeline.source.connect import connect as connect_source
from pipeline.source.shape import SourceRelation, staged_extra
from pipeline.source.window import LATEST, Window, complete_after, iso
from pipeline.sqltext import one_row, quote_ident, quote_literal
from pipeline.staging import StagedBatch
from pipeline.storage.folder import Folder

log = logging.getLogger(__name__)
HOUR = timedelta(hours=1)
HOUR_SECONDS = 3600


@dataclass
class TableReconcile:
    """What reconcile found and backfilled in one table (its part of :class:`ReconcileReport`)."""

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

    def as_dict(self) -> dict[str, object]:
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


@dataclass
class ReconcileReport:
    """What a reconcile did: each table's part (``tables``) and the image's figures over them."""

    since: str
    tables: dict[str, TableReconcile] = field(default_factory=dict)
    snapshot_id: int | None = None  # the one commit of every table's backfill
    seconds: float = 0.0

    @property
    def low(self) -> str | None:
        return min((p.low for p in self.tables.values() if p.low), default=None)

    @property
    def upper(self) -> str | None:
        return max((p.upper for p in self.tables.values() if p.upper), default=None)

    @property
    def hours_compared(self) -> int:
        return sum(p.hours_compared for p in self.tables.values())

    @property
    def hours_differing(self) -> list[str]:
        return sorted({h for p in self.tables.values() for h in p.hours_differing})

    @property
    def rows_backfilled(self) -> int:
        return sum(p.rows_backfilled for p in self.tables.values())

    @property
    def rows_quarantined(self) -> int:
        return sum(p.rows_quarantined for p in self.tables.values())

    @property
    def lake_rows_not_in_source(self) -> int:
        return sum(p.lake_rows_not_in_source for p in self.tables.values())

    @property
    def lake_ids_doubled(self) -> int:
        return sum(p.lake_ids_doubled for p in self.tables.values())

    def as_dict(self) -> dict[str, object]:
        return {"since": self.since, "low": self.low, "upper": self.upper,
                "hours_compared": self.hours_compared, "hours_differing": self.hours_differing,
                "rows_backfilled": self.rows_backfilled, "rows_quarantined": self.rows_quarantined,
                "lake_rows_not_in_source": self.lake_rows_not_in_source,
                "lake_ids_doubled": self.lake_ids_doubled, "snapshot_id": self.snapshot_id,
                "seconds": self.seconds, "tables": {name: p.as_dict() for name, p in self.tables.items()}}

    def summary(self) -> str:
        one = f" (one image, snapshot {self.snapshot_id})" if self.snapshot_id is not None else ""
        return "; ".join(f"{name}: {part.summary()}" for name, part in self.tables.items()) + one


ALL = "all"  # --since all: every row the source ever held, however old (0001-01-01 included)


def reconcile(resolved: ResolvedSettings, since: timedelta | str | None = None) -> ReconcileReport:
    """Compare source and lake over ``since`` before the watermark (default RECONCILE_SINCE;
    ``"all"``: the whole history), up to the start of the look-back, and backfill what the lake
    lacks. The look-back itself is every load's business: each one re-reads it (or checks it is
    complete), so a reconcile there would race the next load for rows still arriving and report
    them as late events beyond the look-back. A lake table dropped by hand is created again here
    (only here: a run stops instead), so ``--since all`` reloads it. With SOURCE_TABLES every
    table is compared and their backfills are promoted in one commit (one image)."""
    if since is None:
        since = resolved.intervals.reconcile_since or ALL
    if isinstance(since, str) and since != ALL:
        raise ValueError(f"since: a timedelta or {ALL!r}, not {since!r}")
    report = ReconcileReport(since=format_duration(since) if isinstance(since, timedelta) else ALL)
    started = time.monotonic()
    with lake_session(resolved, source=True) as lake:  # the source attached as src, for backfills
        _reconcile_image(lake, resolved, since, report)
    report.seconds = round(time.monotonic() - started, 3)
    log.info("reconcile: %s", report.summary())
    return report


def _settled(report: TableReconcile, result: PromotionResult) -> None:
    report.rows_backfilled, report.rows_quarantined = result.rows_inserted, result.rows_quarantined
    report.snapshot_id = result.snapshot_id


def _reconcile_image(lake: Lake, resolved: ResolvedSettings, since: timedelta | str,
                     report: ReconcileReport) -> None:
    """Every table of the image compared over one range and its backfill written; the backfills
    promoted in one commit (a late session and its late events land together). Tables listed in
    SOURCE_TABLES are sealed as one group, claimed in every table's folder meanwhile (a load's
    leftover pass leaves it alone), each with its part of the report."""
    group = staging.new_batch_id()
    claims = [(staging.table_dir(resolved, t), group) for t in resolved.tables]
    for folder, claim in claims:
        staging.claim_batch(folder, claim)
    try:
        written: list[_Backfill] = []
        lakes = lake.tables(resolved.tables)
        refuse_tearing_an_image(list(lakes.values()), resolved.leave_image)
        loaded = (lake.ops_schema, "batches") in table_names(lake)  # (a lake made by this reconcile: none)
        floors = batches.load_floors(lakes) if loaded else {}
        for table, member in lakes.items():
            part = report.tables[table.name] = TableReconcile(since=report.since)
            backfill = _compare_and_write(member, resolved, table, since, part, floors.get(table))
            if backfill is not None:
                written.append(backfill)
        members = {b.lake.name: b.batch_id for b in written}
        staged = [(b.lake, b.seal(group=group, group_batches=members)) for b in written]
        results = promote_together(group, staged, [t.name for t in resolved.tables]) if staged else []
        for (member, _), result in zip(staged, results, strict=True):
            _settled(report.tables[member.name], result)
            report.snapshot_id = result.snapshot_id
    finally:
        for folder, claim in claims:
            staging.release_batch(folder, claim)


def _compare_and_write(lake: LakeTable, resolved: ResolvedSettings, table: TableSpec, since: timedelta | str,
                       report: TableReconcile, floor: datetime | None = None) -> _Backfill | None:
    """Compare ``table``'s hours over ``since`` and write the rows the lake lacks (unsealed), up to
    the look-back of the table's next load: its watermark's, or the image's ``floor`` where its next
    load starts (:func:`pipeline.lake.batches.load_floors`: a late session and its events dated
    after it are read by that load, together; backfilled here in one table alone, an image tore)."""
    # a table dropped by hand is made again empty: then the look-back is reloaded here too
    dropped = ("main", lake.name) not in table_names(lake.lake)
    with connect_source(resolved.source_dsn) as conn:
        stats.require_table(conn, table.qualified)
        relation = SourceRelation.of(conn, table)
        extra = shape.check_shape(conn, relation, resolved.schema_changes_of(table.qualified))
        ensure_tables(lake, column_types(resolved.promotion, resolved.spark.reader), recreate_dropped=True,
                      own_columns=shape.own_table_columns(relation, extra))
        # which ids it holds per UTC hour (an index-bounded aggregate), read as the lake holds them
        how = proof.key_shape(conn, lake, relation)
        source = Source(relation, resolved.source_name(table), extra, how.kind)
        watermark = batches.watermark(lake)
        if watermark is None:
            return None
        if floor is not None:
            watermark = min(watermark, floor)
        upper = watermark if dropped else watermark - resolved.lookback
        low = complete_after(watermark - since if isinstance(since, timedelta) else None,
                             stats.server_now(conn), resolved.source_retention)
        if low is not None and low >= upper:
            return None  # RECONCILE_SINCE within the look-back: the loads cover it all
        report.low, report.upper = iso(low) if low else None, iso(upper)
        source_ids = stats.id_sums(conn, relation, low, upper, id_kind=how.kind, unique=how.unique,
                                   bucket_seconds=HOUR_SECONDS)
        # the ids erased from the lake (--erase) that the source still holds: absent on purpose
        erased = proof.erased_sums(conn, relation, low, upper, how, tombstones.erased_identities(lake),
                                   bucket_seconds=HOUR_SECONDS)
    lake_ids = proof.plus(batches.id_sums(lake, low, upper, HOUR_SECONDS, kind=how.kind), erased)
    report.hours_compared = len(source_ids.keys() | lake_ids.keys())
    report.lake_ids_doubled = _doubled(lake, low, upper)
    hours = [id_checksum.bucket_start(h, HOUR_SECONDS)
             for h in id_checksum.differing(source_ids, lake_ids)]
    report.hours_differing = [iso(h) for h in hours]
    if not hours:
        return None
    window = Window(low=low, upper=upper, nulls=False)
    return _backfill(lake, source, staging.table_dir(resolved, table), hours, window, report)


@dataclass(frozen=True)
class Source:
    """The source table a backfill reads, and its name as a batch records it."""

    table: SourceRelation
    name: str  # database.schema.table (no credentials)
    extra_columns: dict[str, str]  # its columns beyond the pipeline's (shape.check_shape) -> lake types
    id_kind: IdKind  # its key (pipeline.id_checksum)


def _doubled(table: LakeTable, low: datetime | None,
             upper: datetime) -> int:
    """Lake rows beyond one per id in the compared range (a hour holding them differs by id too)."""
    return int(one_row(table.lake.execute(
        f"SELECT count(*) - count(DISTINCT event_id) FROM {table.rows} "
        "WHERE ($low IS NULL OR event_timestamp > $low) AND event_timestamp <= $upper",
        {"low": low, "upper": upper}))[0])


@dataclass(frozen=True)
class _Backfill:
    """A backfill batch's rows, written and not yet sealed (a folder without a manifest is
    never promoted: :mod:`pipeline.staging`)."""

    lake: LakeTable
    source: Source
    folder: Folder
    batch_id: str
    window: Window
    rows: int
    files: list[str]

    def seal(self, group: str, group_batches: dict[str, str]) -> StagedBatch:
        lake, source = self.lake, self.source
        return staging.seal(self.folder, batch_id=self.batch_id, table=lake.name, engine=RECONCILE_ENGINE,
                            window=self.window, row_count=self.rows, files=self.files,
                            lake_id=lake_id(lake.lake), source=source.name, id_column=lake.id_column,
                            time_column=lake.time_column, absent=list(source.table.absent) or None,
                            extra_columns=source.extra_columns or None, id_kind=source.id_kind.value,
                            # checked against every lake row: a source without a unique id may hold,
                            # in these hours, an id the lake has under another time (reconcile is rare)
                            ids_unique=False, group=group, group_batches=group_batches)


def _backfill(table: LakeTable, source: Source, staged: Folder, hours: list[datetime], window: Window,
              report: TableReconcile) -> _Backfill | None:
    """Write the rows of ``hours`` the lake lacks as one batch's file in ``staged`` (sealed by
    the caller, alone or with the other tables' backfills)."""
    ranges = " OR ".join(f"(event_timestamp >= '{iso(h)}'::timestamptz AND event_timestamp < "
                         f"'{iso(h + HOUR)}'::timestamptz)" for h in hours)
    extra = [quote_ident(name) for name in source.extra_columns]
    columns = ", ".join([f"{expr} AS {name}" for name, expr in STAGED_COLUMNS.items()]
                        + staged_extra(source.extra_columns))
    # the query runs in Postgres (index range scans over the differing hours only); its rows
    # are held once in DuckDB for both comparisons
    in_hours = f"({ranges}) AND {window.literal_sql()}"
    # and the rows their transactions wrote dated after the compared range (a late transaction
    # straddling its bound): the backfill takes a transaction whole, not its older rows a snapshot
    # before the next load takes the rest (a savepoint's rows carry ids of their own)
    after = f"event_timestamp > '{iso(window.upper)}'::timestamptz"
    later = (f" OR ({after} AND event_timestamp < {LATEST} AND xmin::text::bigint IN "
             f"(SELECT xmin::text::bigint FROM {source.table.sql} WHERE {in_hours}))"
             if source.table.row_versions else "")
    source_query = f"SELECT {columns} FROM {source.table.sql} WHERE ({in_hours}){later}"
    con = table.lake.con
    kind = source.id_kind
    con.execute("CREATE OR REPLACE TEMP TABLE reconcile_source AS " + validate.validated_sql(
        f"postgres_query('{SOURCE_ALIAS}', {quote_literal(source_query)})", source.extra_columns,
        id_kind=kind))
    hour_list = ", ".join(f"{quote_literal(iso(h))}::TIMESTAMPTZ" for h in hours)
    # compared as the validated source rows hold them (a zero-copy lake holds UUIDs as text)
    lake_in_hours = f"{window.literal_sql()} AND date_trunc('hour', event_timestamp) IN ({hour_list})"
    lake_ids = f"SELECT {duckdb_key('event_id', kind)} AS event_id FROM {table.rows} WHERE {lake_in_hours}"
    report.lake_rows_not_in_source = one_row(con.execute(
        f"SELECT count(*) FROM ({lake_ids}) l WHERE l.event_id NOT IN "
        "(SELECT event_id FROM reconcile_source WHERE event_id IS NOT NULL)"))[0]
    # what the backfill must not write again: the lake's rows of those hours, and of after the range
    held = (f"SELECT {duckdb_key('event_id', kind)} AS event_id FROM {table.rows} "
            f"WHERE ({lake_in_hours}) OR {after}")

    batch_id = staging.new_batch_id()
    folder = staging.batch_dir(staged, batch_id)
    folder.make(exist_ok=False)
    name = "part-00000.parquet"
    h = validate.Helpers.beside(source.extra_columns)
    erased = tombstones.erased_relation(table)
    never_again = (f" AND {duckdb_identity('event_id', kind)} NOT IN (SELECT identity FROM {erased})"
                   if erased else "")
    missing = one_row(con.execute(
        f"COPY (SELECT {h.raw_id} AS event_id, event_type, event_timestamp, {h.raw_details} AS details, "
        f"created_at{''.join(', ' + e for e in extra)} FROM reconcile_source WHERE {h.reason} IS NULL AND "
        f"event_id NOT IN ({held}){never_again}) TO {quote_literal(folder.uri(name))} (FORMAT parquet)"))[0]
    con.execute("DROP TABLE reconcile_source")
    if missing == 0:
        staging.remove_batch(folder)
        return None
    return _Backfill(table, source, folder, batch_id, window, int(missing), [name])
