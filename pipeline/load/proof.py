"""The identity check: does the lake hold exactly the source's ids dated in a range?

Both sides are summarised as (count, id checksum) (:mod:`pipeline.id_checksum`); equal sums end
the check in one aggregate per side. When they differ, the range is compared minute by minute
(hour by hour for ``--reconcile``) and, in the buckets that differ, id by id: the ids the lake
lacks (a load must read them), and the lake rows the source no longer has there or holds twice
(deleted or moved in the source after loading: reported, never hidden).

The lake holds a row when its events table does, or when it was set aside for its details
(``ops.quarantine``) and the source still has it as it was: a row the source fixed is missing
until a load reads it again. A row erased from the lake (``--erase``: its id is a tombstone,
:mod:`pipeline.lake.tombstones`) is absent on purpose: the source may still hold it, and it counts
as held. Rows without a valid id or time have no identity and take no part.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from uuid import UUID

import psycopg

from pipeline import actions, id_checksum
from pipeline.columns import EVENT_COLUMNS
from pipeline.content_hash import RowHash
from pipeline.errors import ConfigError, TerminalError
from pipeline.id_checksum import IdKind, IdSum
from pipeline.image import PerTable
from pipeline.lake import batches, known_since, tombstones
from pipeline.lake.schema import events_column_types
from pipeline.lake.session import LakeTable
from pipeline.settings.pgdsn import PgDsn
from pipeline.source import stats
from pipeline.source.shape import IdShape, SourceRelation
from pipeline.source.window import complete_after, iso

log = logging.getLogger(__name__)
MINUTE = 60
HOUR = 3600
SHOWN = 5  # ids named in a message


@dataclass(frozen=True)
class RangeCheck:
    """The outcome of one comparison over ``(low, upper]``."""

    low: datetime | None
    upper: datetime
    source: IdSum
    lake: IdSum
    missing: list[UUID] = field(default_factory=list)  # source ids the lake lacks
    extra: list[UUID] = field(default_factory=list)  # lake rows beyond the source's, one per surplus row
    moved: list[UUID] = field(default_factory=list)  # source ids in range the lake holds dated elsewhere
    # ids the lake holds where the source does, with other contents (updated after loading)
    changed: list[UUID] = field(default_factory=list)
    # of ``missing``, those an earlier load's snapshot already held (--status): not late arrivals
    missed: list[UUID] = field(default_factory=list)
    buckets: list[datetime] = field(default_factory=list)  # where they differ: the buckets' starts
    bucket_seconds: int = MINUTE
    by_content: bool = False  # the rows' contents compared too (pipeline.content_hash)
    id_kind: IdKind = IdKind.UUID  # how the ids above read back as the table's keys (IdKind.key_of)

    @property
    def exact(self) -> bool:
        """The same ids in the range (and, compared bucket by bucket, each in its bucket), and with
        the content proof the same contents: located row by row where the sums differ (an id the
        source holds in several forms is held in any one of them)."""
        return self.source.ids == self.lake.ids and not (self.missing or self.extra or self.moved
                                                         or self.changed)

    @property
    def diverged(self) -> int:
        """Rows the source deleted or moved in time after loading: the lake keeps them."""
        return len(self.extra) + len(self.moved)

    def describe(self) -> str:
        span = f"({iso(self.low) if self.low else '-inf'}, {iso(self.upper)}]"
        if self.exact:
            return f"lake == source by {self._by} in {span}: {self.source.count} id(s)"
        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} source id(s) not in the lake (e.g. {self._ids(self.missing)})")
        if self.moved:
            parts.append(f"{len(self.moved)} id(s) the source dates here and the lake holds under another "
                         f"event_timestamp (e.g. {self._ids(self.moved)})")
        if self.extra:
            parts.append(f"{len(self.extra)} lake row(s) the source does not hold there (deleted or moved "
                         f"after loading, or an id held twice; e.g. {self._ids(self.extra)})")
        if self.changed:
            parts.append(f"{len(self.changed)} lake row(s) whose contents the source changed after loading "
                         f"(same id and bucket; e.g. {self._ids(self.changed)})")
        first = (f"; the first {self.bucket_seconds // 60}-minute bucket that differs starts "
                 f"{iso(self.buckets[0])}" if self.buckets else "")
        found = "; ".join(parts) or "checksums differ"
        return f"lake differs from source by {self._by} in {span}: {found}{first}"

    @property
    def _by(self) -> str:
        return "id and content" if self.by_content else "id"

    def as_dict(self) -> dict[str, object]:
        return {"low": iso(self.low) if self.low else None, "upper": iso(self.upper),
                "source": self.source.as_dict(), "lake": self.lake.as_dict(), "exact": self.exact,
                "missing": len(self.missing), "extra": len(self.extra), "moved": len(self.moved),
                "missed": len(self.missed), "changed": len(self.changed),
                "changed_ids": [self.id_kind.key_of(i) for i in self.changed[:SHOWN]],
                "missing_ids": [self.id_kind.key_of(i) for i in self.missing[:SHOWN]],
                "extra_ids": [self.id_kind.key_of(i) for i in self.extra[:SHOWN]],
                "differing_buckets": [iso(b) for b in self.buckets[:SHOWN]]}

    def _ids(self, ids: list[UUID]) -> str:
        return (", ".join(self.id_kind.key_of(i) for i in ids[:SHOWN])
                + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else ""))


def source_ids(conn: psycopg.Connection, table: SourceRelation, low: datetime | None, upper: datetime,
               how: IdShape) -> IdSum:
    """The source's side over ``(low, upper]``, in ``conn``'s snapshot (a plan records it)."""
    sums = stats.id_sums(conn, table, low, upper, id_kind=how.kind,
                         unique=how.unique)
    return sums.get(0, IdSum())


@dataclass(frozen=True)
class LakeSide:
    """What the lake holds of a range: its events table's ids, the rows it set aside there for
    their details, and of those the ones the source still has as they were (held too, with the
    source's contents: the quarantine keeps them as they were)."""

    events: IdSum
    set_aside: int
    kept: set[UUID]
    kept_sums: IdSum
    erased: set[UUID] = field(default_factory=set)  # every id erased from the table (tombstones)
    erased_sums: IdSum = IdSum()  # of those, the ones the source still holds in the range

    @property
    def held(self) -> IdSum:
        return self.events + self.kept_sums + self.erased_sums

    @property
    def rows(self) -> int:
        """Rows the lake accounts for in the range: its own, those it set aside, those it erased."""
        return self.events.count + self.set_aside + self.erased_sums.count


def lake_side(conn: psycopg.Connection, lake: LakeTable, table: SourceRelation,
              low: datetime | None, upper: datetime, how: IdShape,
              content: RowHash | None = None) -> LakeSide:
    """The lake's side of ``(low, upper]`` (``conn``: the source, asked which set-aside rows it kept)."""
    events = batches.id_sums(lake, low, upper, content=content, kind=how.kind).get(0, IdSum())
    columns = other_columns(lake, events_column_types(lake))
    set_aside = batches.quarantined_in_range(lake, low, upper, columns, kind=how.kind)
    kept = stats.unchanged_rows(conn, table, set_aside, id_kind=how.kind, columns=columns)
    erased = tombstones.erased_identities(lake)
    gone = erased_sums(conn, table, low, upper, how, erased, content=content).get(0, IdSum())
    return LakeSide(events, len(set_aside), kept, stats.sums_of_ids(conn, table, kept, content), erased, gone)


def erased_sums(conn: psycopg.Connection, table: SourceRelation, low: datetime | None, upper: datetime,
                how: IdShape, erased: set[UUID], *, bucket_seconds: int | None = None,
                content: RowHash | None = None) -> dict[int, IdSum]:
    """The sums (per bucket of ``bucket_seconds``) of the ``erased`` ids the source still holds dated
    in ``(low, upper]``: what the lake accounts for there without holding it."""
    if not erased:
        return {}
    return stats.id_sums(conn, table, low, upper, id_kind=how.kind, unique=how.unique,
                         bucket_seconds=bucket_seconds, content=content, among=erased)


def plus(one: Mapping[int, IdSum], other: Mapping[int, IdSum]) -> dict[int, IdSum]:
    """Two sides' sums per bucket added (a bucket only one holds keeps its own)."""
    return {number: one.get(number, IdSum()) + other.get(number, IdSum())
            for number in one.keys() | other.keys()}


def other_columns(table: LakeTable, types: Mapping[str, str]) -> dict[str, str]:
    """Of the lake table's columns (``types``: name -> lake type), those beyond the pipeline's: the
    other columns a quarantined row is kept with (one the source dropped since counts too: a row
    set aside for its value there can be loaded now), and a repair writes."""
    ours = {table.own(name) for name in EVENT_COLUMNS} | {known_since.COLUMN}
    return {name: kind for name, kind in types.items() if name not in ours}


def row_hash(table: LakeTable, source: SourceRelation, how: IdShape) -> RowHash:
    """The content proof's columns of a table: the lake table's that the source has
    (:mod:`pipeline.content_hash`)."""
    return RowHash.of(events_column_types(table), source.types, source.id_column, source.time_column,
                      id_kind=how.kind, utf8=source.utf8)


def key_shape(conn: psycopg.Connection, table: LakeTable, source: SourceRelation) -> IdShape:
    """How the source's ids are read for the lake table ``lake`` (:class:`IdShape`); a key the lake
    cannot hold refused (:func:`refuse_other_key`)."""
    how = IdShape.read(conn, source, table.id_type())
    refuse_other_key(table, source, how)
    return how


def refuse_other_key(table: LakeTable, source: SourceRelation, ids: IdShape) -> None:
    """A lake table holds its key in one type: a source key retyped between a UUID (or text spelling
    one), an integer and text is refused before anything is read, naming both (its rows could not be
    compared with, or inserted beside, the rows loaded before)."""
    held = table.id_type()
    if held is None or ids.kind.holds(IdKind.of_lake(held, table.id_column)):
        return
    column = f"{source.qualified}.{source.id_column}"
    raise TerminalError(
        f"The source key {column} is {source.types.get(source.id_column)}, {ids.kind.described}, but the "
        f"lake table {table.events_table} holds its key {table.id_column} as {held}. Nothing was read, "
        "staged or changed.",
        f"Give {column} back its type (the lake's rows are keyed by it), or load the table into a new lake "
        "(DUCKLAKE_CATALOG and DUCKLAKE_DATA_PATH of its own). A table of the events shape (event_id, "
        "event_timestamp) is made with a UUID key before its source is read: an integer key needs the "
        "table's own names, SOURCE_TABLES=schema.table:time_column:id_column (a view can rename them).")


def compare(conn: psycopg.Connection, lake: LakeTable, table: SourceRelation,
            low: datetime | None, upper: datetime, how: IdShape, *, source: IdSum | None = None,
            bucket_seconds: int = MINUTE, every_bucket: bool = False, ahead_of: datetime | None = None,
            content: RowHash | None = None) -> RangeCheck:
    """Compare the lake (``lake``) with the source (``conn``, whose snapshot ``source`` was read in
    when given) over ``(low, upper]``; locate the difference id by id when there is one.
    ``every_bucket``: compare bucket by bucket even when the range's sums agree, so a row moved
    inside the range shows too (a proof; a load's check asks only which ids the range holds).
    ``content``: compare the rows' contents too, and name the rows that differ (``changed``).
    ``ahead_of``: the table's watermark; the lake's rows dated after it (read ahead of the source's
    clock with the rest of their transaction) are compared by id (and content) too, wherever the
    source dates them now (:func:`_ahead`)."""
    refuse_other_key(lake, table, how)  # compared by the other type, every row would differ
    check = _in_range(conn, lake, table, low, upper, how, source, bucket_seconds, every_bucket, content)
    if ahead_of is None:
        return check
    gone, changed = _ahead(conn, lake, table, ahead_of, how, content)
    if not (gone or changed):
        return check
    return replace(check, extra=sorted({*check.extra, *gone} - set(check.moved)),
                   changed=sorted({*check.changed, *changed}))


def _ahead(conn: psycopg.Connection, lake: LakeTable, table: SourceRelation, after: datetime, how: IdShape,
           content: RowHash | None) -> tuple[list[UUID], list[UUID]]:
    """The lake's rows dated after ``after`` (no range holds them yet) against the source's rows of
    their ids: (those the source no longer holds, or dates at or before ``after``: a range compares
    them there; those whose contents differ). They are few: rows of a transaction read with its
    other rows while dated ahead of the source's clock."""
    held = batches.rows_after(lake, after, content, kind=how.kind)
    if not held:
        return [], []
    there = stats.rows_among(conn, table, set(held), content, id_kind=how.kind)
    gone = [i for i in held if i not in there or there[i][0] <= after]
    changed = [i for i, digest in held.items() if i in there and there[i][0] > after and content is not None
               and digest not in there[i][1]]
    return sorted(gone), sorted(changed)


def _in_range(conn: psycopg.Connection, lake: LakeTable, table: SourceRelation, low: datetime | None,
              upper: datetime, how: IdShape, source: IdSum | None, bucket_seconds: int, every_bucket: bool,
              content: RowHash | None) -> RangeCheck:
    # the lake first, then the source: every row a load put in the lake was in the source before,
    # so a source read after the lake's cannot miss one of them (read the other way round, rows a
    # running follower promoted in between looked deleted from the source)
    side = lake_side(conn, lake, table, low, upper, how, content)
    if source is None:
        source = stats.id_sums(conn, table, low, upper, id_kind=how.kind, unique=how.unique,
                               content=content).get(0, IdSum())
    held, kept = side.held, side.kept
    by_content = content is not None
    if held == source and not every_bucket:
        return RangeCheck(low, upper, source, held, bucket_seconds=bucket_seconds, by_content=by_content,
                          id_kind=how.kind)
    by_lake = plus(batches.id_sums(lake, low, upper, bucket_seconds, content, kind=how.kind),
                   erased_sums(conn, table, low, upper, how, side.erased, bucket_seconds=bucket_seconds,
                               content=content))
    by_source = stats.id_sums(conn, table, low, upper, id_kind=how.kind, unique=how.unique,
                              bucket_seconds=bucket_seconds, content=content)
    # buckets holding a kept quarantined row differ too (the events table lacks it): its id is
    # found with the others and counted as held
    differing = id_checksum.differing(by_source, by_lake)
    lake_ids = (batches.ids_in_buckets(lake, low, upper, differing, bucket_seconds, kind=how.kind)
                if differing else {})
    source_rows = stats.ids_in_buckets(conn, table, low, upper, differing, bucket_seconds,
                                       id_kind=how.kind) if differing else {}
    absent: set[UUID] = set()
    surplus: list[UUID] = []  # one entry per lake row the source does not hold in its bucket
    buckets = []  # the buckets where an id differs (not only a kept quarantined row)
    for number in differing:
        counted, there = lake_ids.get(number, Counter()), source_rows.get(number, set())
        lacking = there - set(counted) - kept - side.erased
        beyond = [i for i, n in counted.items() for _ in range(n if i not in there else n - 1)]
        if lacking or beyond:
            buckets.append(id_checksum.bucket_start(number, bucket_seconds))
        absent |= lacking
        surplus += beyond
    # an id the source dates in one bucket and the lake in another (or outside the range) moved
    elsewhere = batches.held_ids(lake, absent - set(surplus), kind=how.kind)
    if not (how.unique and how.kind.one_spelling):
        # a source that may repeat an id dates it in two buckets; the lake holds it once: held
        absent, elsewhere = absent - elsewhere, set()
    moved = (absent & set(surplus)) | elsewhere
    missing = sorted(absent - moved)
    extra = sorted(i for i in surplus if i not in moved)
    changed: list[UUID] = []
    if content is not None and differing:
        changed, where = _changed(conn, lake, table, low, upper, differing, bucket_seconds, content,
                                  {*absent, *surplus, *moved, *kept})
        buckets = sorted({*buckets, *where})
    return RangeCheck(low, upper, source, held, missing, extra, sorted(moved), changed=changed,
                      buckets=buckets, bucket_seconds=bucket_seconds, by_content=by_content, id_kind=how.kind)


def _changed(conn: psycopg.Connection, lake: LakeTable, table: SourceRelation, low: datetime | None,
             upper: datetime, differing: list[int], bucket_seconds: int, content: RowHash,
             named: set[UUID]) -> tuple[list[UUID], list[datetime]]:
    """The ids in ``differing`` buckets both sides hold whose lake row the source holds in no form
    (``named``: ids found missing, surplus or moved already), and their buckets' starts."""
    source_forms: dict[UUID, set[str]] = {}
    for _, row_id, digest in stats.rows_in_buckets(conn, table, low, upper, differing, bucket_seconds,
                                                   content):
        source_forms.setdefault(row_id, set()).add(digest)
    changed: dict[UUID, int] = {}
    for number, row_id, digest in batches.rows_in_buckets(lake, low, upper, differing, bucket_seconds,
                                                          content):
        if row_id in source_forms and row_id not in named and digest not in source_forms[row_id]:
            changed[row_id] = number
    return sorted(changed), [id_checksum.bucket_start(b, bucket_seconds) for b in set(changed.values())]


def newer_than_snapshot(source_dsn: PgDsn, table: SourceRelation, check: RangeCheck,
                        how: IdShape) -> RangeCheck:
    """``check`` without the lake rows the source holds in the range now: committed after the
    snapshot it compared with (another load took them meanwhile), not deleted or moved."""
    if not check.extra:
        return check
    from pipeline.source.connect import connect

    with connect(source_dsn) as conn:
        now = stats.ids_in_range(conn, table, check.low, check.upper, set(check.extra),
                                 id_kind=how.kind)
    extra = [i for i in check.extra if i not in now]
    return replace(check, extra=extra)


@dataclass(frozen=True)
class ImageCheck(PerTable[RangeCheck]):
    """Every table of the image proven by id (``Pipeline.prove()``): exact only when each is;
    ``not_loaded``: tables nothing was loaded into yet (no range to prove: said, not proven)."""

    not_loaded: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        return all(check.exact for check in self.tables.values())

    @property
    def missing(self) -> list[UUID]:
        return [i for check in self.tables.values() for i in check.missing]

    @property
    def extra(self) -> list[UUID]:
        return [i for check in self.tables.values() for i in check.extra]

    @property
    def moved(self) -> list[UUID]:
        return [i for check in self.tables.values() for i in check.moved]

    @property
    def changed(self) -> list[UUID]:
        return [i for check in self.tables.values() for i in check.changed]

    def describe(self) -> str:
        return "\n".join([super().describe(), *(f"{name}: nothing loaded yet: no range to prove"
                                                for name in self.not_loaded)])


def prove_in(conn: psycopg.Connection, lake: LakeTable, table: SourceRelation,
             since: timedelta | None, *, retention: timedelta) -> RangeCheck:
    """:func:`prove` on a source connection (its snapshot) and a lake session the caller holds, over
    the table's own range (up to its own watermark: tables of an image need not share one);
    ``retention``: how far back the source keeps its rows (SOURCE_RETENTION, zero: all), where the
    range starts at the latest."""
    watermark = batches.watermark(lake)
    if watermark is None:
        raise ConfigError("Nothing has been loaded yet: there is no range to prove.",
                          f"Load first ({actions.RUN}).")
    now = stats.server_now(conn)
    upper = min(watermark, now)
    low = complete_after(upper - since if since is not None else None, now, retention)
    bucket = HOUR if since is None or since > timedelta(days=1) else MINUTE
    how = key_shape(conn, lake, table)
    return compare(conn, lake, table, low, upper, how, bucket_seconds=bucket, every_bucket=True,
                   content=row_hash(lake, table, how), ahead_of=watermark)
