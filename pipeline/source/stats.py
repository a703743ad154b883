"""What the source holds: its clock, whether the table exists, and a window's row count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

import psycopg
from psycopg import sql

from pipeline import id_checksum, invocation
from pipeline.content_hash import RowHash, framed, postgres_instant_text
from pipeline.errors import SourceAccessDenied, SourceTableMissing
from pipeline.id_checksum import IdKind, IdSum, among_values, postgres_among
from pipeline.source.shape import SourceRelation, staged_text
from pipeline.source.window import DATED, FINITE_FLOOR, LATEST, UNDATED, XID_SPAN, Arrivals, Window, range_sql
from pipeline.sqltext import one_row, quote_if_needed, quote_qualified


@dataclass(frozen=True)
class WindowStats:
    """What the source holds inside a window: row count and timestamp range."""

    rows: int
    min_ts: datetime | None
    max_ts: datetime | None
    table_pages: int = 0  # a plain table's size in pages when counted (0: a view, a partitioned table)
    table_rows: int = 0  # its row estimate (pg_class.reltuples)


def server_now(conn: psycopg.Connection) -> datetime:
    """The source's own clock: ``upper`` comes from here so client clock skew cannot lose rows."""
    return one_row(conn.execute("SELECT now()"))[0]


def session_timezone(conn: psycopg.Connection) -> str:
    """The zone naive source timestamps are read in: SOURCE_TIMEZONE, else the database's own."""
    return one_row(conn.execute("SELECT current_setting('TimeZone')"))[0]


def table_exists(conn: psycopg.Connection, qualified: str) -> bool:
    """Is there such a table? Names as the catalog spells them (public.Orders is "Orders"). In a schema
    the role may not use, the lookup itself is refused ("permission denied for schema"): it counts as
    there, and :func:`require_select` names the GRANT."""
    usable = one_row(conn.execute(
        "SELECT n.oid IS NULL OR has_schema_privilege(n.oid, 'USAGE') FROM (SELECT %s::text AS name) s "
        "LEFT JOIN pg_namespace n ON n.nspname = s.name", (qualified.split(".")[0],)))[0]
    if not usable:
        return True
    return one_row(conn.execute("SELECT to_regclass(%s) IS NOT NULL", (quote_qualified(qualified),)))[0]


def require_table(conn: psycopg.Connection, qualified: str) -> None:
    if not table_exists(conn, qualified):
        raise SourceTableMissing(
            f"The source table {qualified} does not exist.",
            f"Create it by running the generator once ({invocation.generator_command()}), "
            "or point SOURCE_TABLE at the right table.",
        )


def require_select(conn: psycopg.Connection, qualified: str) -> None:
    """The role may read the table (``SELECT`` on it, ``USAGE`` on its schema), or an error naming
    the role, the table and the GRANT (was: "unexpected error … permission denied" mid-run)."""
    schema = qualified.split(".")[0]
    role, usage, select = one_row(conn.execute(
        "SELECT current_user, has_schema_privilege(%s, 'USAGE'), "
        "has_schema_privilege(%s, 'USAGE') AND has_table_privilege(%s, 'SELECT')",
        (schema, schema, quote_qualified(qualified))))
    if usage and select:
        return
    table, grantee = ".".join(quote_if_needed(part) for part in qualified.split(".")), quote_if_needed(role)
    grants = ([] if usage else [f"GRANT USAGE ON SCHEMA {quote_if_needed(schema)} TO {grantee};"]) + \
        [f"GRANT SELECT ON {table} TO {grantee};"]
    raise SourceAccessDenied(
        f"The source role {role} may not read {qualified} (no " + ("SELECT" if usage else "USAGE on schema "
                                                                   f"{schema}") + "). Nothing was read.",
        f"As the table's owner, run: {' '.join(grants)}")


def rows_after(conn: psycopg.Connection, source: SourceRelation, upper: datetime) -> int:
    """Rows dated after ``upper`` (the source's clock): future-dated events, which wait."""
    query = sql.SQL(f"SELECT count(*) FROM {{t}} WHERE event_timestamp > %(upper)s "
                    f"AND event_timestamp < {LATEST}").format(
        t=sql.SQL(source.sql))
    return one_row(conn.execute(query, {"upper": upper}))[0]


def future_rows(conn: psycopg.Connection, source: SourceRelation, upper: datetime, *, id_kind: IdKind,
                limit: int) -> dict[int, set[UUID]]:
    """The rows dated after ``upper`` (the source's clock) by the transaction that wrote them (its
    32-bit id) -> their identities; at most ``limit`` rows (the time column's index finds them).
    Only a relation whose rows carry ``xmin`` (a table) has any here."""
    if not source.row_versions:
        return {}
    identity = id_checksum.postgres_id("event_id", id_kind)
    query = sql.SQL(f"SELECT xmin::text::bigint, {identity} FROM {{t}} WHERE event_timestamp > %(upper)s "
                    f"AND event_timestamp < {LATEST} LIMIT %(limit)s").format(t=sql.SQL(source.sql))
    found: dict[int, set[UUID]] = {}
    for xid, identity in conn.execute(query, {"upper": upper, "limit": limit}).fetchall():
        if identity is not None:  # a key that names no row is quarantined when due, alone
            found.setdefault(int(xid), set()).add(identity)
    return found


def transactions_in(conn: psycopg.Connection, source: SourceRelation, window: Window,
                    xids: set[int]) -> set[int]:
    """Which of the transactions ``xids`` (32-bit ids) wrote rows that ``window`` reads."""
    if not source.row_versions or not xids:
        return set()
    query = sql.SQL("SELECT DISTINCT xmin::text::bigint FROM {t} WHERE ({w}) "
                    "AND xmin::text::bigint = ANY(%(xids)s)").format(t=sql.SQL(source.sql),
                                                                   w=sql.SQL(window.where_sql()))
    return {int(row[0]) for row in conn.execute(query, {**window.params(), "xids": sorted(xids)}).fetchall()}


def arrived_behind(conn: psycopg.Connection, source: SourceRelation, arrivals: Arrivals,
                   low: datetime) -> tuple[int, datetime | None]:
    """Rows that arrived since ``arrivals``' plan dated at or before ``low``, and the earliest: a
    transaction open longer than the look-back commits rows dated before any window (the arrival
    column's index finds them; their dates cannot)."""
    query = sql.SQL(f"SELECT count(*), {_utc('min(event_timestamp)')} FROM {{t}} WHERE {{arrived}} "
                    f"AND {FINITE_FLOOR} AND event_timestamp <= %(low)s").format(
        t=sql.SQL(source.sql), arrived=sql.SQL(arrivals.arrived_sql()))
    count, earliest = one_row(conn.execute(query, {**arrivals.params(), "low": low}))
    return int(count), _instant(earliest)


@dataclass(frozen=True)
class PartEnd:
    """Where a part of a history ends: the time of its last row, and how many rows are dated from
    where it starts up to there when the walk knows it exactly (None: count them). ``rest``: the
    range held no more than a part: the part is the rest of the history, up to the walk's ``upper``
    (``at``), read whole — as no part, its batch saying the history is read."""

    at: datetime
    rows: int | None
    rest: bool = False


def part_end(conn: psycopg.Connection, source: SourceRelation, low: datetime | None, upper: datetime,
             rows: int) -> PartEnd:
    """Where a part of about ``rows`` rows dated in ``(low, upper]`` ends (a walk of the time
    column's index). The walk reads the row after the ``rows``-th too: when it is dated later, the
    part holds exactly ``rows`` rows, and the part needs no count of its own (a tie at the bound, or
    a naive column, whose wall-time order is not the instants', leaves it to :func:`window_stats`).
    When the range holds no more than ``rows``, the end is its ``rest`` (a history ending on a full
    part was read as a bounded part whose next part held nothing, so no batch ever said its history
    was read: --status said CATCHING UP for ever, and the table stayed outside the image's floor);
    a whole history (no ``low``) is counted through the same index: a first load no longer than a
    part needs no count of its window, and no second scan to sum its ids
    (:attr:`pipeline.source.plan.BatchPlan.ids_read`)."""
    # a naive column's index walk: rows in wall-time order are about as many (the window ends at
    # this row's instant, exactly, whichever it is)
    order = source.wall_clock.column if source.wall_clock else "event_timestamp"
    # the instant computed for the two rows kept, outside the walk: computed for every row the walk
    # skips, it made a walk over 5M entries of the index take 0.34 s instead of 0.19 s
    walk = f"SELECT event_timestamp FROM {{t}} WHERE {_range_sql(low, source)} ORDER BY {{order}} " \
           "OFFSET %(skip)s LIMIT 2"
    query = sql.SQL(f"SELECT {_utc('event_timestamp')} FROM ({walk}) walked").format(
        t=sql.SQL(source.sql), order=sql.Identifier(order))
    found = [row[0].replace(tzinfo=UTC) for row in conn.execute(query, {"low": low, "upper": upper,
                                                                       "skip": rows - 1}).fetchall()]
    if len(found) == 2:
        exact = source.wall_clock is None and found[1] > found[0]
        return PartEnd(found[0], rows if exact else None)
    # no row after the rows-th: the range is the rest of the history, whole
    if found and source.wall_clock is None:  # the rows-th row is the range's last: it holds that many
        return PartEnd(upper, rows, rest=True)
    if source.wall_clock is not None or low is not None:
        # a naive column's walk is not in the instants' order; the rest after parts is read with its
        # look-back (pipeline.load.plan), which the window's own count covers
        return PartEnd(upper, None, rest=True)
    count = sql.SQL(f"SELECT count(*) FROM {{t}} WHERE {_range_sql(low, source)}").format(
        t=sql.SQL(source.sql))
    return PartEnd(upper, int(one_row(conn.execute(count, {"low": low, "upper": upper}))[0]), rest=True)


class PartEnds:
    """The walks to parts' ends (:func:`part_end`) made in one snapshot, each made once: the next
    part's walk runs ahead, while this part commits (:mod:`pipeline.load.ahead`), and its plan finds
    it here. A walk's answer is its snapshot's, so keeping it changes nothing but when it is made."""

    def __init__(self) -> None:
        self._found: dict[tuple[SourceRelation, datetime | None, datetime, int], PartEnd] = {}

    def end(self, conn: psycopg.Connection, source: SourceRelation, low: datetime | None, upper: datetime,
            rows: int) -> PartEnd:
        key = (source, low, upper, rows)
        if key not in self._found:
            self._found[key] = part_end(conn, source, low, upper, rows)
        return self._found[key]


def part_stats(conn: psycopg.Connection, source: SourceRelation, window: Window, dated: int) -> WindowStats:
    """:func:`window_stats` of a part whose ``dated`` rows (those in its time range) a walk
    counted (:func:`part_end`): only the rows without a time it reads too are counted, and the
    earliest time looked up, both through the time column's index."""
    query = sql.SQL(f"SELECT (SELECT count(*) FROM {{t}} WHERE {UNDATED} AND {{w}}), "
                    f"(SELECT {_utc('min(event_timestamp)')} FROM {{t}} WHERE "
                    f"{range_sql('%(low)s' if window.low is not None else None, '%(upper)s')})").format(
        t=sql.SQL(source.sql), w=sql.SQL(window.where_sql()))
    undated, lo = one_row(conn.execute(query, window.params()))
    lo = _instant(lo)
    pages, estimate = _table_size(conn, source)
    return WindowStats(rows=dated + int(undated), min_ts=lo, max_ts=window.upper, table_pages=pages,
                       table_rows=estimate)


def _range_sql(low: datetime | None, source: SourceRelation) -> str:
    return range_sql("%(low)s" if low is not None else None, "%(upper)s", source.wall_clock)


def id_sums(conn: psycopg.Connection, source: SourceRelation, low: datetime | None, upper: datetime, *,
            id_kind: IdKind, unique: bool, bucket_seconds: int | None = None,
            content: RowHash | None = None, among: set[UUID] | None = None) -> dict[int, IdSum]:
    """Which ids the source holds dated in ``(low, upper]``, whatever their arrival time, as
    (count, checksum) per bucket of ``bucket_seconds`` (one bucket 0 without): the source side of
    the identity check (:mod:`pipeline.load.proof`). A range scan of the ``event_timestamp`` index,
    index-only when it includes ``event_id`` (the generator's table has ``INCLUDE (event_id)``).
    ``content``: with the sums of the rows' hashes (the rows themselves are read then); an id the
    source holds in several forms (no unique key) adds none: the lake holds one of them, which
    :func:`rows_in_buckets` tells. ``among``: only these ids (by their index: the erased ids the
    source still holds, :mod:`pipeline.lake.tombstones`)."""
    uuid_sql = id_checksum.postgres_id("event_id", id_kind)
    bucket = id_checksum.postgres_bucket(bucket_seconds) if bucket_seconds else "0"
    where = f"FROM {{t}} WHERE {_range_sql(low, source)}"
    if among is not None:
        where += f" AND {postgres_among('event_id', id_kind)}"
    if content is None:
        # a text id's unique index does not make its UUID unique ('ab…' and 'AB…' spell one id)
        distinct = "" if unique and id_kind.one_spelling else "DISTINCT "
        rows = f"SELECT {distinct}{uuid_sql} AS id, {bucket} AS bucket {where}"
    elif unique and id_kind.one_spelling:
        # OFFSET 0: the subquery stays one (flattened, each use of hash computed the md5 again)
        rows = f"SELECT {uuid_sql} AS id, {bucket} AS bucket, {content.postgres()} AS hash {where} OFFSET 0"
    else:
        rows = (f"SELECT id, bucket, CASE WHEN count(DISTINCT hash) = 1 THEN min(hash) END AS hash FROM "
                f"(SELECT {uuid_sql} AS id, {bucket} AS bucket, {content.postgres()} AS hash {where} "
                "OFFSET 0) forms GROUP BY id, bucket")
    hashes = id_checksum.postgres_hash_sums("hash") if content else "0, 0"
    query = sql.SQL(f"SELECT bucket, count(*), {id_checksum.postgres_sums('id')}, {hashes} FROM ({rows}) ids "
                    "WHERE id IS NOT NULL GROUP BY bucket").format(t=sql.SQL(source.sql))
    found = conn.execute(query, {"low": low, "upper": upper, **(
        {"among": among_values(among, id_kind)} if among is not None else {})}).fetchall()
    return {int(number): IdSum.of(count, high, low_sum).with_content(c_high, c_low)
            for number, count, high, low_sum, c_high, c_low in found}


def rows_in_buckets(conn: psycopg.Connection, source: SourceRelation, low: datetime | None, upper: datetime,
                    buckets: list[int], bucket_seconds: int, content: RowHash) -> set[tuple[int, UUID, str]]:
    """(bucket, id, row hash) of every row the source holds dated in ``(low, upper]`` in ``buckets``:
    where the contents differ."""
    uuid_sql = id_checksum.postgres_id("event_id", content.id_kind)
    bucket = id_checksum.postgres_bucket(bucket_seconds)
    query = sql.SQL(f"SELECT {bucket}, {uuid_sql}, {content.postgres()} FROM {{t}} "
                    f"WHERE {_range_sql(low, source)} "
                    f"AND {bucket} = ANY(%(buckets)s)").format(t=sql.SQL(source.sql))
    return {(int(number), row_id, digest) for number, row_id, digest
            in conn.execute(query, {"low": low, "upper": upper, "buckets": buckets}).fetchall()
            if row_id is not None}


def rows_among(conn: psycopg.Connection, source: SourceRelation, ids: set[UUID], content: RowHash | None, *,
               id_kind: IdKind) -> dict[UUID, tuple[datetime, set[str | None]]]:
    """The source's rows of ``ids``, wherever dated: id -> (its time, its rows' hashes; None without
    ``content``)."""
    if not ids:
        return {}
    digest = content.postgres() if content is not None else "NULL"
    query = sql.SQL(f"SELECT {id_checksum.postgres_id('event_id', id_kind)}, event_timestamp::timestamptz, "
                    f"{digest} FROM {{t}} WHERE {postgres_among('event_id', id_kind)}").format(
                        t=sql.SQL(source.sql))
    found: dict[UUID, tuple[datetime, set[str | None]]] = {}
    for row_id, at, row_hash in conn.execute(query, {"among": among_values(ids, id_kind)}).fetchall():
        if row_id in ids:
            found.setdefault(row_id, (at, set()))[1].add(row_hash)
    return found


def sums_of_ids(conn: psycopg.Connection, source: SourceRelation, ids: set[UUID],
                content: RowHash | None) -> IdSum:
    """(count, checksum) of ``ids`` with, given ``content``, the sums of the source's rows' hashes
    of them (one row each: the lake's quarantine keeps rows the source holds once)."""
    if content is None or not ids:
        return id_checksum.of_ids(ids)
    uuid_sql = id_checksum.postgres_id("event_id", content.id_kind)
    query = sql.SQL(f"SELECT {id_checksum.postgres_hash_sums('hash')} FROM (SELECT DISTINCT ON (id) "
                    f"{uuid_sql} AS id, {content.postgres()} AS hash FROM {{t}} "
                    f"WHERE {postgres_among('event_id', content.id_kind)}) found").format(
                        t=sql.SQL(source.sql))
    high, low = one_row(conn.execute(query, {"among": among_values(ids, content.id_kind)}))
    return id_checksum.of_ids(ids).with_content(high, low)


def ids_in_buckets(conn: psycopg.Connection, source: SourceRelation, low: datetime | None, upper: datetime,
                   buckets: list[int], bucket_seconds: int, *, id_kind: IdKind) -> dict[int, set[UUID]]:
    """The ids the source holds dated in ``(low, upper]`` in each of ``buckets``: where a difference is."""
    uuid_sql = id_checksum.postgres_id("event_id", id_kind)
    bucket = id_checksum.postgres_bucket(bucket_seconds)
    query = sql.SQL(f"SELECT DISTINCT {bucket}, {uuid_sql} FROM {{t}} WHERE {_range_sql(low, source)} AND "
                    f"{bucket} = ANY(%(buckets)s)").format(t=sql.SQL(source.sql))
    found: dict[int, set[UUID]] = {b: set() for b in buckets}
    for number, row_id in conn.execute(query, {"low": low, "upper": upper, "buckets": buckets}).fetchall():
        if row_id is not None:
            found[int(number)].add(row_id)
    return found


def ids_in_range(conn: psycopg.Connection, source: SourceRelation, low: datetime | None, upper: datetime,
                 ids: set[UUID], *, id_kind: IdKind) -> set[UUID]:
    """Which of ``ids`` the source holds dated in ``(low, upper]``."""
    uuid_sql = id_checksum.postgres_id("event_id", id_kind)
    query = sql.SQL(f"SELECT {uuid_sql} FROM {{t}} WHERE {_range_sql(low, source)} "
                    f"AND {postgres_among('event_id', id_kind)}").format(t=sql.SQL(source.sql))
    return {row[0] for row in conn.execute(query, {"low": low, "upper": upper,
                                                   "among": among_values(ids, id_kind)}).fetchall()}


def written_before(conn: psycopg.Connection, source: SourceRelation, ids: set[UUID], xmin: int, *,
                   id_kind: IdKind) -> set[UUID]:
    """Which of ``ids`` were written by transactions older than ``xmin`` (an earlier plan's
    snapshot's): rows that snapshot saw. Empty for a relation without ``xmin`` (a view)."""
    if not ids or not source.row_versions:
        return set()
    uuid_sql = id_checksum.postgres_id("event_id", id_kind)
    older = f"mod(xmin::text::bigint - %(x32)s + {XID_SPAN}, {XID_SPAN}) >= {XID_SPAN // 2}"
    query = sql.SQL(f"SELECT {uuid_sql} FROM {{t}} WHERE {postgres_among('event_id', id_kind)} "
                    f"AND {older}").format(t=sql.SQL(source.sql))
    return {row[0] for row in conn.execute(query, {"among": among_values(ids, id_kind),
                                                   "x32": xmin % XID_SPAN}).fetchall()}


def unchanged_rows(conn: psycopg.Connection, source: SourceRelation, rows: dict[UUID, set[str]], *,
                   id_kind: IdKind, columns: Mapping[str, str] | None = None) -> set[UUID]:
    """Of ``rows`` (id -> the digests of a row as its records set it aside: its event columns and
    ``columns``, name -> lake type, as staged; :func:`pipeline.lake.batches.set_aside_digest`), the
    ids whose source row is as one record has it: a quarantined row the source fixed, moved,
    removed or changed otherwise (a column it dropped included) is no longer held."""
    if not rows:
        return set()
    uuid_sql = id_checksum.postgres_id("event_id", id_kind)
    texts = ["event_type", postgres_instant_text("event_timestamp"), "details::text",
             postgres_instant_text("created_at"),
             *(staged_text(name, kind) if name in source.types else "NULL::text"
               for name, kind in (columns or {}).items())]
    digest = f"md5({' || '.join(framed(text, 'octet_length') for text in texts)})"
    query = sql.SQL(f"SELECT {uuid_sql}, {digest} FROM {{t}} "
                    f"WHERE {postgres_among('event_id', id_kind)}").format(t=sql.SQL(source.sql))
    found = conn.execute(query, {"among": among_values(rows, id_kind)}).fetchall()
    return {row_id for row_id, digest in found if row_id in rows and digest in rows[row_id]}


def window_stats(conn: psycopg.Connection, source: SourceRelation, window: Window) -> WindowStats:
    """Rows and time range of ``window`` (the table's existence was checked by the preflight)."""
    query = sql.SQL(
        # ::timestamptz: a naive column's values are wall-clock time in the session's zone
        f"SELECT count(*), {_utc(f'min(event_timestamp) FILTER (WHERE {DATED})')}, "
        # the range's: rows a window pulls from its transactions are dated after it
        f"{_utc(f'max(event_timestamp) FILTER (WHERE {DATED} AND event_timestamp <= %(upper)s)')} "
        "FROM {t} WHERE {w}"
    ).format(t=sql.SQL(source.sql), w=sql.SQL(window.where_sql()))
    rows, lo, hi = one_row(conn.execute(query, window.params()))
    lo, hi = _instant(lo), _instant(hi)
    pages, estimate = _table_size(conn, source)
    return WindowStats(rows=rows, min_ts=lo, max_ts=hi, table_pages=pages, table_rows=estimate)


def _utc(instant_sql: str) -> str:
    """An instant read as UTC wall time (:func:`_instant` makes it an instant again): rendered in
    the session's zone, the first instant of year 1 reads as 1 BC west of UTC, which psycopg
    cannot take, and a load of such a table stopped (found by the adversary)."""
    # ::timestamptz first: a naive column is wall-clock time in the session's zone
    return f"(({instant_sql})::timestamptz AT TIME ZONE 'UTC')"


def _instant(utc: datetime | None) -> datetime | None:
    return utc.replace(tzinfo=UTC) if utc is not None else None


def _table_size(conn: psycopg.Connection, source: SourceRelation) -> tuple[int, int]:
    """A plain table's pages and rows: a window holding much of the table is read in page ranges
    (pipeline.extract.partitions.page_ranges), each page once, not by time over an index."""
    pages, estimate = one_row(conn.execute(
        "SELECT CASE WHEN c.relkind = 'r' THEN pg_relation_size(c.oid) / current_setting('block_size')::int "
        "ELSE 0 END, greatest(c.reltuples, 0)::bigint FROM pg_class c WHERE c.oid = %s::regclass",
        (quote_qualified(source.qualified),)))
    return int(pages), int(estimate)
