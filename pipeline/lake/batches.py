"""``<lake>.ops.batches``: one row per promoted batch; the watermark is derived from it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TypedDict, TypeVar
from uuid import UUID

import duckdb

from pipeline import id_checksum
from pipeline.content_hash import RowHash, duckdb_instant_text, framed
from pipeline.id_checksum import IdKind, IdSum, duckdb_identity, duckdb_key
from pipeline.lake.rows import fetch_dicts
from pipeline.lake.session import Lake, LakeTable
from pipeline.lake.validate import REASON_BAD_JSON, REASON_UNFIT, json_pointer
from pipeline.logs import process_name
from pipeline.sqltext import one_row, quote_literal

K = TypeVar("K")


@dataclass(frozen=True)
class BatchRecord:
    """One row of ``ops.batches``, written in the same transaction as the batch's rows."""

    batch_id: str
    table_name: str
    engine: str
    window_low: datetime | None
    window_upper: datetime
    rows_staged: int
    rows_inserted: int
    rows_duplicate: int
    min_event_timestamp: datetime | None
    max_event_timestamp: datetime | None
    extract_seconds: float
    promote_seconds: float
    staged_at: datetime
    promoted_at: datetime
    promoted_by: str = field(default_factory=process_name)  # this process, at promotion
    arrival_mark: datetime | None = None  # its plan saw every row that arrived up to here
    freshness_p50: float | None = None  # seconds from arrival to commit, of its new arrivals
    freshness_p95: float | None = None
    rows_behind_mark: int | None = None  # rows its plan's completeness check found behind the mark
    source: str | None = None  # database.schema.table it was read from (None: a batch from before)
    # its proof: the ids its plan's snapshot held in (window_low, window_upper] (pipeline.id_checksum)
    source_ids: int | None = None
    source_id_checksum: str | None = None
    snapshot_xmin: int | None = None  # its plan snapshot's xmin: the next plan reads newer transactions' rows
    # SOURCE_TABLES: a part of a table's catch-up (its window bounded by rows, behind the image's instant)
    backfill: bool | None = None
    source_filenode: int | None = None  # the source table's storage its plan read (a rewrite changes it)


def watermark(table: LakeTable) -> datetime | None:
    """The largest ``event_timestamp`` already promoted for this table (None before any)."""
    return one_row(table.lake.execute(
        f"SELECT max(max_event_timestamp) FROM {table.lake.batches_table} WHERE table_name = ?",
        [table.name],
    ))[0]


def load_floors(tables: Mapping[K, LakeTable]) -> dict[K, datetime | None]:
    """Where the next load of each table starts reading (before its look-back): the image's floor,
    the oldest watermark of the tables loaded and not catching up (every such table's window starts
    there, so that a transaction's rows are read in all of them together); None for a table catching
    up (it reads its own history in parts). A reconcile backfills up to it (the next load reads what
    is after it, as one image); a repair leaves it the source's rows the lake lacks after it."""
    standings = {key: standing(lake) for key, lake in tables.items()}
    catching = {key for key, where in standings.items() if where.catching_up is not None}
    common = image_floor(standings, catching)
    return {key: None if key in catching else common for key in standings}


def image_floor(standings: Mapping[K, Standing], catching: Container[K]) -> datetime | None:
    """The oldest watermark of the tables loaded and not ``catching`` up: where one range over the
    image starts (a load's windows) or ends (prove, repair, reconcile). A table catching up is days
    behind: counted, it would hold the others back, or hide their differences."""
    return min((where.watermark for key, where in standings.items()
                if where.watermark is not None and key not in catching), default=None)


def loaded(tables: Mapping[K, LakeTable]) -> dict[K, LakeTable]:
    """The tables something was loaded into (a watermark), for a comparison over an image: a table
    nothing was loaded into yet has no range and must not stop the others; none loaded, all of them
    (the comparison then says nothing was loaded)."""
    found = {key: lake for key, lake in tables.items() if watermark(lake) is not None}
    return found or dict(tables)


def bound_source(table: LakeTable) -> str | None:
    """The source this lake table was last loaded from (None before its first recorded batch)."""
    row = table.lake.execute(
        f"SELECT source FROM {table.lake.batches_table} WHERE table_name = ? AND source IS NOT NULL "
        "ORDER BY promoted_at DESC LIMIT 1", [table.name]).fetchone()
    return row[0] if row else None


def loaded_with(table: LakeTable) -> list[str]:
    """The lake tables this table was last committed with as one image, itself included: the image
    of the latest commit that records one holding it (a load, reconcile or repair listing it, with
    rows of it or not), or, before commits recorded theirs, the tables of its last batch's group;
    [] when that was committed alone (or none was)."""
    recorded = table.lake.execute(
        "SELECT json_extract_string(commit_extra_info, '$.image[*]') AS image "
        f"FROM {table.lake.name}.snapshots() WHERE json_exists(commit_extra_info, '$.image') "
        "ORDER BY snapshot_id DESC").fetchall()
    for (image,) in recorded:
        if table.name in image:
            return sorted(image)
    last = table.lake.execute(f"SELECT batch_id FROM {table.lake.batches_table} WHERE table_name = ? "
                              "ORDER BY promoted_at DESC LIMIT 1", [table.name]).fetchone()
    if last is None:
        return []
    row = table.lake.execute(
        f"SELECT json_keys(commit_extra_info, '$.batches') FROM {table.lake.name}.snapshots() "
        "WHERE json_extract_string(commit_extra_info, '$.batches.' || ?) = ? LIMIT 1",
        [table.name, last[0]]).fetchone()
    return sorted(row[0]) if row and row[0] else []


def is_recorded(lake: Lake, batch_id: str) -> bool:
    return bool(one_row(lake.execute(
        f"SELECT count(*) FROM {lake.batches_table} WHERE batch_id = ?", [batch_id]
    ))[0])


@dataclass(frozen=True)
class Standing:
    """Where a table stands, read in one query (what a plan reads of every table, each tick)."""

    watermark: datetime | None  # the largest event_timestamp promoted (None before any)
    # the upper of its latest batch when that was a part of a catch-up (a bounded backfill behind
    # the image), else None: the next part starts there, whether the last one inserted rows or only
    # quarantined them (its watermark then did not move)
    catching_up: datetime | None


def standing(table: LakeTable) -> Standing:
    """The table's watermark and catch-up (:class:`Standing`), in one read of ``ops.batches``."""
    mark, latest = one_row(table.lake.execute(
        "SELECT max(max_event_timestamp), arg_max(struct_pack(part := backfill, upper := window_upper), "
        f"promoted_at) FROM {table.lake.batches_table} WHERE table_name = ?", [table.name]))
    return Standing(mark, latest["upper"] if latest and latest["part"] else None)


def last_arrivals(table: LakeTable
                  ) -> tuple[datetime, datetime, int | None, int | None] | None:
    """The latest arrival mark a promoted batch's plan recorded, with that plan's ``upper``,
    snapshot xmin and the source table's storage it read (None: no batch recorded one — a first
    load, or a lake loaded without an arrival column)."""
    row = table.lake.execute(
        f"SELECT arrival_mark, window_upper, snapshot_xmin, source_filenode FROM {table.lake.batches_table} "
        "WHERE table_name = ? AND arrival_mark IS NOT NULL ORDER BY arrival_mark DESC LIMIT 1",
        [table.name]).fetchone()
    return (row[0], row[1], row[2], row[3]) if row else None


def _range_sql(low: datetime | None) -> str:
    return ("event_timestamp > $low AND " if low is not None else "") + "event_timestamp <= $upper"


def id_sums(table: LakeTable, low: datetime | None, upper: datetime, bucket_seconds: int | None = None,
            content: RowHash | None = None, *, kind: IdKind) -> dict[int, IdSum]:
    """Which ids the events table holds dated in ``(low, upper]``, as (count, checksum) per bucket
    (the lake side of :mod:`pipeline.load.proof`). Every row counts: an id held twice differs.
    ``content``: with the sums of the rows' hashes. ``kind``: the table's key, as its source holds it
    (the callers refused a lake keyed otherwise: :func:`pipeline.load.proof.refuse_other_key`)."""
    bucket = id_checksum.duckdb_bucket(bucket_seconds) if bucket_seconds else "0"
    hashes = id_checksum.duckdb_hash_sums("hash") if content else "0, 0"
    rows = table.lake.execute(
        f"SELECT bucket, count(*), {id_checksum.duckdb_sums('id')}, {hashes} FROM (SELECT "
        # (a UUID as text in a zero-copy lake made by the JDBC reader)
        f"{duckdb_identity('event_id', kind)} AS id, {bucket} AS bucket"
        f"{f', {content.duckdb()} AS hash' if content else ''} FROM {table.rows} "
        f"WHERE {_range_sql(low)}) GROUP BY bucket", {"upper": upper, **({"low": low} if low else {})}
    ).fetchall()
    return {int(number): IdSum.of(count, high, low_sum).with_content(c_high, c_low)
            for number, count, high, low_sum, c_high, c_low in rows}


def rows_in_buckets(table: LakeTable, low: datetime | None, upper: datetime, buckets: list[int],
                    bucket_seconds: int, content: RowHash) -> set[tuple[int, UUID, str]]:
    """(bucket, id, row hash) of the events table's rows dated in ``(low, upper]`` in ``buckets``."""
    bucket = id_checksum.duckdb_bucket(bucket_seconds)
    rows = table.lake.execute(
        f"SELECT {bucket}, {duckdb_identity('event_id', content.id_kind)}, {content.duckdb()} "
        f"FROM {table.rows} "
        f"WHERE {_range_sql(low)} AND list_contains($buckets, {bucket})",
        {"buckets": buckets, "upper": upper, **({"low": low} if low else {})}).fetchall()
    return {(int(number), row_id, digest) for number, row_id, digest in rows if row_id is not None}


def rows_after(table: LakeTable, after: datetime, content: RowHash | None, *,
               kind: IdKind) -> dict[UUID, str | None]:
    """The events table's rows dated after ``after``: id -> row hash (None without ``content``)."""
    digest = content.duckdb() if content is not None else "NULL"
    rows = table.lake.execute(f"SELECT {duckdb_identity('event_id', kind)}, {digest} FROM {table.rows} "
                              "WHERE event_timestamp > $after", {"after": after}).fetchall()
    return {row_id: row_hash for row_id, row_hash in rows if row_id is not None}


def ids_in_buckets(table: LakeTable, low: datetime | None, upper: datetime,
                   buckets: list[int], bucket_seconds: int, *, kind: IdKind) -> dict[int, Counter[UUID]]:
    """The ids the events table holds dated in ``(low, upper]`` in each of ``buckets``, with how often."""
    bucket = id_checksum.duckdb_bucket(bucket_seconds)
    rows = table.lake.execute(
        f"SELECT {bucket}, {duckdb_identity('event_id', kind)}, count(*) FROM {table.rows} "
        f"WHERE {_range_sql(low)} AND list_contains($buckets, {bucket}) GROUP BY ALL",
        {"buckets": buckets, "upper": upper, **({"low": low} if low else {})}).fetchall()
    found: dict[int, Counter[UUID]] = {b: Counter() for b in buckets}
    for number, row_id, count in rows:
        if row_id is not None:
            found[int(number)][row_id] += int(count)
    return found


def holds_no_row(table: LakeTable, after: datetime | None = None) -> bool:
    """Does the events table hold no row (dated after ``after``; file statistics prune the rest)?"""
    if after is None:
        return rows_held(table) == 0
    return one_row(table.lake.execute(f"SELECT count(*) FROM {table.rows} WHERE event_timestamp > $after",
                                      {"after": after}))[0] == 0


def rows_held(table: LakeTable) -> int:
    """The events table's rows."""
    return int(one_row(table.lake.execute(f"SELECT count(*) FROM {table.events_table}"))[0])


def held_ids(table: LakeTable, ids: set[UUID], *, kind: IdKind, after: datetime | None = None,
             upper: datetime | None = None) -> set[UUID]:
    """Which of ``ids`` the events table holds, however dated (``after``: dated after it;
    ``upper``: dated no later)."""
    if not ids:
        return set()
    # a semi join on the ids (hashed once): list_contains scanned the whole list for every row,
    # and --status took 440 s for 31,000 ids missing from a 2.65M-row lake
    identity = duckdb_identity("event_id", kind)
    bounds = {name: value for name, value in (("after", after), ("upper", upper)) if value is not None}
    dated = ("" if after is None else " AND event_timestamp > $after") + (
        "" if upper is None else " AND event_timestamp <= $upper")
    rows = table.lake.execute(f"SELECT DISTINCT {identity} FROM {table.rows} "
                              f"WHERE {identity} IN (SELECT unnest($ids)){dated}",
                              {"ids": list(ids), **bounds}).fetchall()
    return {row[0] for row in rows}


def quarantined_in_range(table: LakeTable, low: datetime | None, upper: datetime,
                         columns: Iterable[str] = (), *, kind: IdKind) -> dict[UUID, set[str]]:
    """Rows set aside for their contents (a valid id and time: details that are not JSON, a value
    its lake column cannot hold) dated in ``(low, upper]`` that the events table does not hold:
    id -> the digests of the row as each record set it aside (``columns``: the table's other
    columns, :func:`set_aside_digest`). The lake holds them while the source keeps them as one
    record has them (:func:`pipeline.source.stats.unchanged_rows`: a row changed A, B, then A
    again is recorded once as A — the records are kept once each); a row the source fixed is read
    and loaded again."""
    set_aside = table.lake.execute(f"""
        SELECT id, list(DISTINCT digest) FROM (
            SELECT {duckdb_identity(duckdb_key("event_id", kind), kind)} AS id,
                   TRY_CAST(event_timestamp AS TIMESTAMPTZ) AS event_timestamp,
                   {set_aside_digest(columns)} AS digest, quarantined_at
            FROM {table.lake.quarantine_table} WHERE table_name = $table
              AND (reason = $bad_json OR starts_with(reason, $unfit)))
        WHERE id IS NOT NULL AND {_range_sql(low)}
        GROUP BY id""", {"table": table.name, "bad_json": REASON_BAD_JSON, "unfit": REASON_UNFIT,
                         "upper": upper, **({"low": low} if low else {})}).fetchall()
    # only these few ids are looked up in the events table: an anti-join with the range built a
    # hash table of every row the range holds, on every proof, most often for no row set aside
    held = held_ids(table, {row_id for row_id, _ in set_aside}, kind=kind, after=low, upper=upper)
    return {row_id: set(digests) for row_id, digests in set_aside if row_id not in held}


def set_aside_digest(columns: Iterable[str]) -> str:
    """md5 of a quarantined row as set aside — its event columns (times as instants) and
    ``columns`` as staged (the texts ``ops.quarantine`` keeps) — what
    :func:`pipeline.source.stats.unchanged_rows` computes from the source's row."""
    texts = ["event_type", duckdb_instant_text("TRY_CAST(event_timestamp AS TIMESTAMPTZ)"), "details",
             duckdb_instant_text("TRY_CAST(created_at AS TIMESTAMPTZ)"),
             *(f"json_extract_string(source_columns, {quote_literal(json_pointer(name))})"
               for name in columns)]
    return f"md5({' || '.join(framed(text, 'strlen') for text in texts)})"


def record(lake: Lake, row: BatchRecord) -> None:
    values = asdict(row)
    lake.execute(f"INSERT INTO {lake.batches_table} ({', '.join(values)}) "
                 f"VALUES ({', '.join('?' * len(values))})", list(values.values()))


class SteadyState(TypedDict):
    """The loads since an instant: rows read per row inserted, and freshness (``--status``'s last hour)."""

    loads: int
    rows_read: int
    rows_inserted: int
    rows_read_per_inserted: float | None
    freshness_p50_seconds: float | None
    freshness_p95_seconds: float | None
    rows_behind_mark: int


def history_rate(table: LakeTable) -> float | None:
    """Rows per second the table's history has been read at: its parts' rows over their extraction
    and promotion seconds (None: no part yet)."""
    rows, seconds = one_row(table.lake.execute(
        f"SELECT sum(rows_staged), sum(extract_seconds + promote_seconds) FROM {table.lake.batches_table} "
        "WHERE table_name = ? AND backfill", [table.name]))
    return float(rows) / float(seconds) if rows and seconds else None


def steady_state(table: LakeTable, since: datetime) -> SteadyState:
    """Loads since ``since``: rows read (staged) per row inserted — about 1 when loads read only
    what arrived, the look-back's multiple when they re-read it — and freshness (seconds from a
    row's arrival to its commit: the median of the loads' p50s, the highest of their p95s)."""
    def totals(freshness: str) -> tuple:
        return one_row(table.lake.execute(
            f"SELECT count(*), sum(rows_staged), sum(rows_inserted), {freshness} FROM "
            f"{table.lake.batches_table} WHERE table_name = ? AND promoted_at > ?",
            [table.name, since]))

    try:
        loads, read, inserted, p50, p95, behind = totals(
            "median(freshness_p50), max(freshness_p95), sum(rows_behind_mark)")
    except duckdb.BinderException:  # a lake made before these columns, read before its next load
        loads, read, inserted, p50, p95, behind = totals("NULL, NULL, NULL")
    return SteadyState(loads=loads, rows_read=int(read or 0), rows_inserted=int(inserted or 0),
                       rows_read_per_inserted=round(read / inserted, 3) if inserted else None,
                       freshness_p50_seconds=p50, freshness_p95_seconds=p95,
                       rows_behind_mark=int(behind or 0))


def combined(states: list[SteadyState]) -> SteadyState:
    """SOURCE_TABLES: the tables' loads since an instant as one (each load commits a batch per table
    with rows, so the loads are the busiest table's; freshness the slowest table's)."""
    read, inserted = sum(s["rows_read"] for s in states), sum(s["rows_inserted"] for s in states)
    p50s = [s["freshness_p50_seconds"] for s in states if s["freshness_p50_seconds"] is not None]
    p95s = [s["freshness_p95_seconds"] for s in states if s["freshness_p95_seconds"] is not None]
    return SteadyState(loads=max((s["loads"] for s in states), default=0), rows_read=read,
                       rows_inserted=inserted,
                       rows_read_per_inserted=round(read / inserted, 3) if inserted else None,
                       freshness_p50_seconds=max(p50s, default=None),
                       freshness_p95_seconds=max(p95s, default=None),
                       rows_behind_mark=sum(s["rows_behind_mark"] for s in states))


def recent_batches(table: LakeTable, limit: int = 5) -> list[dict]:
    return fetch_dicts(table.lake.con, f"SELECT * FROM {table.lake.batches_table} WHERE table_name = ? "
                       "ORDER BY promoted_at DESC LIMIT ?", [table.name, limit])
