"""Compare the lake with the source: counts, distinct ids and an order-independent checksum,
and every column's contents.

The source is read through DuckDB's postgres extension in the same session as the lake, so the
event columns are hashed by the same function over the same canonical text forms. A table's own
columns are proven as a load's proof is (:mod:`pipeline.content_hash`: each side hashes its rows,
Postgres its own text forms): Postgres types have no one DuckDB form (an array read by the
extension is a list, in the lake the text Postgres printed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb
import psycopg

from pipeline.columns import EVENT_COLUMNS, OPTIONAL, WallClock, canonical_relation
from pipeline.id_checksum import duckdb_identity
from pipeline.image import PerTable
from pipeline.lake import batches, tombstones, validate
from pipeline.lake.attach_sql import SOURCE_ALIAS
from pipeline.lake.connect import lake_session
from pipeline.lake.schema import quarantined_rows
from pipeline.lake.session import LakeTable
from pipeline.load import proof
from pipeline.load.proof import RangeCheck
from pipeline.progress import Progress
from pipeline.settings import ResolvedSettings, TableSpec
from pipeline.source.connect import connect
from pipeline.source.shape import SourceRelation
from pipeline.source.window import complete_after
from pipeline.sqltext import one_row, quote_ident, quote_literal, quote_qualified

_FINGERPRINT = """
    SELECT count(*) AS rows, count(DISTINCT event_id) AS ids,
           coalesce(sum(hash(event_id::VARCHAR, event_type, epoch_us(event_timestamp),
                             details::VARCHAR, epoch_us(created_at))), 0) AS checksum
    FROM {relation} {where}
"""


@dataclass(frozen=True)
class Fingerprint:
    rows: int
    ids: int
    checksum: int


@dataclass(frozen=True)
class Comparison:
    lake: Fingerprint
    source: Fingerprint  # the source's loadable rows, one per id: what the lake should hold
    quarantined: int = 0  # source rows that cannot be loaded, kept in ops.quarantine
    differences: tuple[str, ...] = ()  # a few rows that differ, when the fingerprints do
    contents: RangeCheck | None = None  # every column's contents, by row hash (None: not compared)

    @property
    def equal(self) -> bool:
        return self.lake == self.source and (self.contents is None or self.contents.exact)

    def describe(self) -> str:
        verdict = "lake == source" if self.equal else "LAKE DIFFERS FROM SOURCE"
        quarantined = f"; {self.quarantined} rows quarantined (ops.quarantine)" if self.quarantined else ""
        # every column's proof, said whenever it differs (the fingerprint reads the event columns only:
        # "checksums match" read as the whole verdict when only another column differed)
        contents = [self.contents.describe()] if self.contents and not self.contents.exact else []
        return (f"{verdict}: lake {self.lake.rows} rows / {self.lake.ids} ids, source "
                f"{self.source.rows} loadable rows / {self.source.ids} ids, event columns' checksums "
                f"{'match' if self.lake.checksum == self.source.checksum else 'differ'}{quarantined}"
                + "".join(f"\n  {line}" for line in [*self.differences, *contents]))


@dataclass(frozen=True)
class ImageComparison(PerTable[Comparison]):
    """Every table of the image against its source (``Pipeline.verify()``): equal only when each is."""

    @property
    def equal(self) -> bool:
        return all(comparison.equal for comparison in self.tables.values())


def fingerprint(con: duckdb.DuckDBPyConnection, relation: str,
                upper: datetime | None = None, low: datetime | None = None) -> Fingerprint:
    """Count, distinct ids and content checksum of ``relation``'s rows dated in ``(low, upper]``."""
    where = " AND ".join([*(["event_timestamp <= $upper"] if upper else []),
                          *(["event_timestamp > $low"] if low else [])])
    where = f"WHERE {where}" if where else ""
    params = {**({"upper": upper} if upper else {}), **({"low": low} if low else {})}
    rows, ids, checksum = one_row(con.execute(
        _FINGERPRINT.format(relation=relation, where=where), params))
    return Fingerprint(int(rows), int(ids), int(checksum))


def compare(settings: ResolvedSettings, upper: datetime | None = None) -> ImageComparison:
    """Fingerprint every table of the lake and its source, in one session, up to ``upper`` (default:
    the source's clock, so future-dated events, which wait until due, do not count as missing)."""
    meter = Progress("comparing lake and source")  # 15-20 s of silence on 2-3M rows otherwise
    with lake_session(settings, read_only=True, source=True) as opened, meter.ticking(), opened.all_cores():
        con = opened.con
        meter.step("reading the source's clock")
        [[now]] = con.execute(f"SELECT * FROM postgres_query('{SOURCE_ALIAS}', 'SELECT now()')").fetchall()
        # a source that keeps only SOURCE_RETENTION: older rows are the lake's history alone
        low = complete_after(None, now, settings.source_retention)
        with connect(settings.source_dsn) as source:
            image = ImageComparison({
                spec.name: _compare_table(table, spec, upper or now, low, meter, source)
                for spec, table in opened.tables(settings.tables).items()})
    meter.finish(sum(comparison.lake.rows for comparison in image.tables.values()), "done")
    return image


def _compare_table(lake: LakeTable, table: TableSpec, upper: datetime, low: datetime | None,
                   meter: Progress, source: psycopg.Connection) -> Comparison:
    """``table`` in the lake against its source: the source as the lake should hold it, the rows
    that can be loaded, one per id; and every column's contents (``source``: Postgres)."""
    con, named = lake.lake.con, f" of {table.name}"
    relation = SourceRelation.of(source, table)
    how = proof.key_shape(source, lake, relation)  # compared by the other type, every row would differ
    source_table = _as_read(con, _source_instants(con, table), (SOURCE_ALIAS, table.schema, table.name),
                            table)
    # the source as the lake should hold it: its loadable rows, but for those set aside for a value
    # their lake column cannot hold (the fingerprint does not read those columns; the proof does)
    # and but for those erased from the lake (--erase): absent on purpose, whatever the source holds
    unfit, kind = batches.quarantined_in_range(lake, low, upper, kind=how.kind), how.kind
    identity, erased = duckdb_identity("event_id", kind), tombstones.erased_relation(lake)
    listed = ", ".join(f"{quote_literal(str(i))}::UUID" for i in unfit)
    left_out = [f"{identity} NOT IN ({listed})"] if unfit else []
    left_out += [f"{identity} NOT IN (SELECT identity FROM {erased})"] if erased else []
    beside = f" WHERE {' AND '.join(left_out)}" if left_out else ""
    source_relation = f"(SELECT * FROM ({validate.loadable_sql(True, source_table, id_kind=kind)}){beside})"
    lake_relation = _as_read(con, lake.events_table, (lake.lake.name, "main", table.name), table)
    quarantined = quarantined_rows(lake)
    meter.step(f"fingerprinting the lake{named} (count, ids, checksum)")
    in_lake = fingerprint(con, lake_relation, upper, low)
    meter.step(f"fingerprinting the source{named}")
    in_source = fingerprint(con, source_relation, upper, low)
    meter.step(f"proving every column's contents{named}")
    contents = proof.compare(source, lake, relation, low, upper, how, bucket_seconds=proof.HOUR,
                             content=proof.row_hash(lake, relation, how), ahead_of=upper)
    if in_lake == in_source:
        return Comparison(lake=in_lake, source=in_source, quarantined=quarantined, contents=contents)
    meter.step(f"finding the rows that differ{named}")
    differences = sample_differences(con, lake_relation, source_relation, upper, table.id_column, low=low)
    return Comparison(lake=in_lake, source=in_source, quarantined=quarantined, differences=differences,
                      contents=contents)


def _source_instants(con: duckdb.DuckDBPyConnection, table: TableSpec) -> str:
    """The source table with its naive timestamp columns made instants by Postgres: wall-clock time
    in the source's zone, whose rules only Postgres has (DuckDB knows no POSIX zone such as
    ``EST5EDT,M3.2.0,M11.1.0`` and reads ``UTC+3`` as three hours east, where Postgres means west).
    A table without one is scanned as it is (DuckDB splits that scan by pages)."""
    attached = f"{SOURCE_ALIAS}.{quote_qualified(table.qualified)}"
    types = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = ? "
                        "AND schema_name = ? AND table_name = ? ORDER BY column_index",
                        [SOURCE_ALIAS, table.schema, table.name]).fetchall()
    if all(kind != "TIMESTAMP" for _, kind in types):
        return attached
    # (within a day of Postgres' bounds a naive time has no instant in every zone: none, as staged)
    columns = ", ".join(f"{WallClock.instant_sql(name)} AS {quote_ident(name)}" if kind == "TIMESTAMP"
                        else quote_ident(name) for name, kind in types)
    query = f"SELECT {columns} FROM {quote_qualified(table.qualified)}"
    return f"postgres_query('{SOURCE_ALIAS}', {quote_literal(query)})"


def _as_read(con: duckdb.DuckDBPyConnection, relation: str, where: tuple[str, str, str],
             table: TableSpec) -> str:
    """``relation`` (the source's table or the lake's, at ``where``: database, schema, table) under
    the names the comparison reads, NULL for an optional column it lacks (:mod:`pipeline.columns`)."""
    have = {name for (name,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = ? "
        "AND table_name = ?", list(where)).fetchall()}
    return canonical_relation(relation, table.id_column, table.time_column,
                              [name for name in OPTIONAL if name not in have])


def sample_differences(con: duckdb.DuckDBPyConnection, lake: str, source: str, upper: datetime,
                       id_column: str = "event_id", limit: int = 5, *,
                       low: datetime | None = None) -> tuple[str, ...]:
    """Up to ``limit`` rows of each kind of difference: in the source only, in the lake only,
    and present on both sides with different contents (by id); ``id_column``: the table's own, as the
    lines name it."""
    columns = ", ".join("details::VARCHAR AS details" if name == "details" else name
                        for name in EVENT_COLUMNS)
    floor = "event_timestamp > $low" if low else "true"
    rows = con.execute(f"""
        WITH s AS (SELECT {columns} FROM {source} WHERE event_timestamp <= $upper AND {floor}),
             l AS (SELECT {columns} FROM {lake} WHERE event_timestamp <= $upper AND {floor})
        (SELECT 'only in the source', s.event_id, s.event_timestamp FROM s ANTI JOIN l USING (event_id)
         ORDER BY 3 LIMIT {limit})
        UNION ALL
        (SELECT 'only in the lake', l.event_id, l.event_timestamp FROM l ANTI JOIN s USING (event_id)
         ORDER BY 3 LIMIT {limit})
        UNION ALL
        (SELECT 'contents differ', s.event_id, s.event_timestamp FROM s JOIN l USING (event_id)
         WHERE s.event_type IS DISTINCT FROM l.event_type OR s.event_timestamp <> l.event_timestamp
            OR s.details IS DISTINCT FROM l.details OR s.created_at IS DISTINCT FROM l.created_at
         ORDER BY 3 LIMIT {limit})""", {"upper": upper, **({"low": low} if low else {})}).fetchall()
    return tuple(f"{kind}: {id_column} {_printable(row_id)} at {ts}" for kind, row_id, ts in rows)


def _printable(key: object) -> str:
    """A key as a line can hold it: a text key's control characters escaped (a newline and a terminal
    sequence in a key printed a line of their own)."""
    text = str(key)
    return text if text.isprintable() else repr(text)
