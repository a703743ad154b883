"""``--repair``: make the lake hold exactly the source's rows over a range again, in one snapshot.

The identity check (:mod:`pipeline.load.proof`) reports rows the source deleted, moved (an
``UPDATE`` of ``event_timestamp``) or changed (an ``UPDATE`` of any other column: the content
proof) after they were loaded; loads never change what the lake holds (an id is loaded once).
Repair is the one command that does: in one DuckLake transaction, under
the promote lock, it deletes the lake's rows of every id that differs and inserts those ids as
the source holds them now (validated as a load validates them), with a commit message saying how
many of each. Time travel keeps the state before: ``--at-version`` the snapshot before it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg

from pipeline import id_checksum
from pipeline.id_checksum import IdKind
from pipeline.lake import batches, divergences, tombstones, validate
from pipeline.lake.attach_sql import SOURCE_ALIAS
from pipeline.lake.connect import lake_session
from pipeline.lake.schema import events_column_types, insert_columns_sql
from pipeline.lake.session import LakeTable
from pipeline.load import proof
from pipeline.load.preflight import refuse_tearing_an_image
from pipeline.promote.commit import LakeCommit
from pipeline.settings import ResolvedSettings, TableSpec
from pipeline.source import stats
from pipeline.source.connect import connect
from pipeline.source.shape import (
    STAGED_COLUMNS,
    SourceRelation,
    check_shape,
    staged_extra,
)
from pipeline.source.snapshot import exported_snapshot
from pipeline.source.window import iso
from pipeline.sqltext import one_row, quote_ident, quote_literal

log = logging.getLogger(__name__)
FOREVER = datetime(9999, 12, 31, tzinfo=UTC)


@dataclass(frozen=True)
class TableRepair:
    """One table's repair: what differed before it, and what it replaced."""

    check: proof.RangeCheck  # what differed before the repair
    rows_removed: int = 0
    rows_loaded: int = 0
    snapshot_id: int | None = None
    # source ids the lake lacks dated after where the table's next load starts: left to that load,
    # which reads them with the image's other tables (loaded here alone, an image would tear)
    left_to_load: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"before": self.check.as_dict(), "rows_removed": self.rows_removed,
                "rows_loaded": self.rows_loaded, "snapshot_id": self.snapshot_id,
                "left_to_load": self.left_to_load}

    def summary(self) -> str:
        left = (f"; {self.left_to_load} source id(s) the lake lacks are left to the next load, which "
                "reads them with the image's other tables" if self.left_to_load else "")
        if self.check.exact:
            return f"nothing to repair: {self.check.describe()}"
        if self.snapshot_id is None:
            return (f"nothing repaired: {self.check.describe()}"
                    + (left or "; the rows the source moved past the compared range stay as loaded until "
                       "a load reaches them"))
        return (f"repaired {self.check.describe()}: removed {self.rows_removed} lake row(s), loaded "
                f"{self.rows_loaded} as the source holds them, in snapshot {self.snapshot_id} (the "
                f"snapshot before it keeps the old state){left}")


@dataclass(frozen=True)
class RepairReport:
    """A repair of the image: each table's part, committed in one snapshot."""

    tables: dict[str, TableRepair]

    @property
    def exact(self) -> bool:
        """Did lake and source agree everywhere before the repair (nothing to repair)?"""
        return all(part.check.exact for part in self.tables.values())

    @property
    def rows_removed(self) -> int:
        return sum(part.rows_removed for part in self.tables.values())

    @property
    def rows_loaded(self) -> int:
        return sum(part.rows_loaded for part in self.tables.values())

    @property
    def snapshot_id(self) -> int | None:
        """The one snapshot the repair committed (None: nothing was replaced)."""
        return max((p.snapshot_id for p in self.tables.values() if p.snapshot_id is not None), default=None)

    def as_dict(self) -> dict[str, object]:
        return {"tables": {name: part.as_dict() for name, part in self.tables.items()},
                "rows_removed": self.rows_removed, "rows_loaded": self.rows_loaded,
                "snapshot_id": self.snapshot_id}

    def summary(self) -> str:
        return "; ".join(f"{name}: {part.summary()}" for name, part in self.tables.items())


def repair(settings: ResolvedSettings, since: timedelta | None) -> RepairReport:
    """Compare over ``since`` before the watermark (None: everything up to it) and, where lake and
    source differ by id, replace the lake's rows of those ids with the source's, in one snapshot.
    With SOURCE_TABLES every table is compared in one source snapshot and repaired in that one
    commit (the image stays one instant), each table's promote lock held, in table order."""
    with lake_session(settings, source=True) as lake:
        every = lake.tables(settings.tables)
        loaded = batches.loaded(every)  # none loaded: the comparison says so
        tables, lakes = list(loaded), list(loaded.values())
        refuse_tearing_an_image(list(every.values()), settings.leave_image)
        with LakeCommit(lakes) as commit:  # every table's promote lock, held from compare to commit
            # each table over its own range, up to its own watermark; what the lake lacks after where
            # its next load starts (the image's floor) is that load's, read with the other tables
            floors = batches.load_floors(loaded)
            with exported_snapshot(settings.source_dsn, arrivals=False) as snapshot:
                plans = [_plan(snapshot.conn, member, settings, table, since, floors[table])
                         for member, table in zip(lakes, tables, strict=True)]
            todo = [plan for plan in plans if plan.ids]
            if not todo:
                _settle_kept(settings, plans, tables, "a repair's proof")  # compared equal
                return _report(plans, {})
            message = "; ".join(f"{plan.lake.name} {plan.describe()}" for plan in todo)
            info: dict[str, object] = {"repair": {plan.lake.name: plan.check.as_dict() for plan in plans},
                                       "image": sorted(t.name for t in settings.tables)}
            done = {}
            with commit.transaction(message, info):
                for plan in todo:
                    done[plan.lake.name] = plan.apply()
            snapshot_id = commit.snapshot_id
        _settle_kept(settings, plans, tables, "a repair")
    report = _report(plans, done, snapshot_id)
    log.info("%s", report.summary())
    return report


def _settle_kept(settings: ResolvedSettings, plans: list[_Plan], tables: list[TableSpec], by: str) -> None:
    """What checks saw differ (:mod:`pipeline.lake.divergences`) inside the range the repair compared
    is repaired, or was not so; one kept beyond it (a table whose watermark is past the image's: the
    repair compares every table up to the oldest) is proven over its own range now, by id and
    content, and cleared where lake == source — else it stays, and --status says it."""
    for plan in plans:
        divergences.clear(plan.lake, plan.check.low, plan.check.upper, by)
    beyond = [(plan, table, kept) for plan, table in zip(plans, tables, strict=True)
              if (kept := divergences.unrepaired(plan.lake))]
    if not beyond:
        return
    with connect(settings.source_dsn) as conn:
        for plan, table, kept in beyond:
            source = SourceRelation.of(conn, table)
            how = proof.key_shape(conn, plan.lake, source)
            for divergence in kept:
                check = proof.compare(conn, plan.lake, source, divergence.low, divergence.upper, how,
                                      every_bucket=True, content=proof.row_hash(plan.lake, source, how))
                if check.exact:
                    divergences.clear(plan.lake, divergence.low, divergence.upper,
                                      f"{by}'s proof of its range")


def _report(plans: list[_Plan], done: dict[str, tuple[int, int]], snapshot_id: int | None = None
            ) -> RepairReport:
    """The repair's report: each table's part."""
    return RepairReport({plan.lake.name: TableRepair(plan.check, *done.get(plan.lake.name, (0, 0)),
                                                     snapshot_id if plan.lake.name in done else None,
                                                     plan.left_to_load)
                         for plan in plans})


@dataclass(frozen=True)
class _Plan:
    """One table's repair: what differs, and the source's rows of those ids."""

    lake: LakeTable
    check: proof.RangeCheck
    ids: list[UUID]
    source: str  # the source's rows of ``ids`` as staged (a DuckDB relation over postgres_query)
    extra: dict[str, str]  # the table's other columns those rows carry -> their lake types
    have: Mapping[str, str]  # the lake table's columns
    kind: IdKind  # the table's key (pipeline.id_checksum)
    left_to_load: int = 0  # source ids the lake lacks after the floor: the next load's

    def describe(self) -> str:
        low = iso(self.check.low) if self.check.low else "-inf"
        return (f"repair {low} .. {iso(self.check.upper)}: the lake's rows of {len(self.ids)} id(s) replaced "
                "by the source's")

    def apply(self) -> tuple[int, int]:
        """Inside the repair's transaction: the lake's rows of the ids out, the source's in — as a
        load takes them: a row the lake cannot hold (a value its column cannot hold, a column
        retyped in the source) is set aside in ``ops.quarantine``, where the proof counts it held."""
        lake = self.lake
        id_list = ", ".join(f"{quote_literal(str(i))}::UUID" for i in self.ids)
        kind = self.kind
        own_id = quote_ident(lake.own("event_id"))
        identity = id_checksum.duckdb_identity(own_id, kind)
        removed = one_row(lake.lake.execute(
            f"DELETE FROM {lake.events_table} WHERE {identity} IN ({id_list})"))[0]
        rows = f"({validate.loadable_sql(True, self.source, extra_columns=self.extra, id_kind=kind)})"
        loaded = one_row(lake.lake.execute(insert_columns_sql(lake, self.have, rows, list(self.extra))))[0]
        rejected = validate.rejected_sql(True, False, self.extra, relation=self.source, id_kind=kind)
        if rejected is not None:
            lake.lake.execute(validate.quarantine_sql(lake.lake.quarantine_table, rejected, self.extra,
                                                      tombstones.erased_relation(lake), id_kind=kind),
                              {"batch_id": f"repair {iso(self.check.upper)}", "table_name": lake.name})
        return int(removed), int(loaded)


def _plan(conn: psycopg.Connection, lake: LakeTable, settings: ResolvedSettings, table: TableSpec,
          since: timedelta | None, floor: datetime | None) -> _Plan:
    source = SourceRelation.of(conn, table)
    # a misnamed column: said, not a Binder error
    check_shape(conn, source, settings.schema_changes_of(table.qualified))
    check = proof.prove_in(conn, lake, source, since, retention=settings.source_retention)
    how = proof.key_shape(conn, lake, source)
    # a row the source moved past the compared range is re-dated where the source dates it now, as
    # a row read ahead (past the watermark: every check compares it wherever it is); kept as loaded,
    # the repair did not converge (status named it again, as a row of the look-back the source lacks)
    ahead = stats.ids_in_range(conn, source, check.upper, FOREVER, {*check.extra, *check.moved},
                               id_kind=how.kind)
    # but one moved past the source's clock waits for its time: its old version is taken out now
    # (time travel keeps it), and a load takes the row when due
    due_later = stats.ids_in_range(conn, source, stats.server_now(conn), FOREVER, ahead,
                                   id_kind=how.kind) if ahead else set()
    # a source row the lake lacks dated after the floor: the next load reads it (and its linked rows)
    later = (stats.ids_in_range(conn, source, floor, FOREVER, set(check.missing), id_kind=how.kind)
             if floor is not None and check.missing and floor < check.upper else set())
    ids = sorted({*(i for i in check.missing if i not in later), *check.extra, *check.moved, *check.changed})
    # every column the lake table has beyond the pipeline's that the source still has, as the source
    # holds it (cast as a load casts); one the source dropped stays NULL in the repaired rows
    have, there = events_column_types(lake), source.types
    extra = {name: kind for name, kind in proof.other_columns(lake, have).items() if name in there}
    columns = ", ".join([f"{expr} AS {name}" for name, expr in STAGED_COLUMNS.items()]
                        + staged_extra(extra))
    # as the source holds them now, wherever it dates them (in the range, moved past it, or read
    # ahead with their transaction and changed since), but for those due later
    among = id_checksum.postgres_among("event_id", how.kind, id_checksum.among_literal(ids, how.kind))
    waiting = (" AND NOT " + id_checksum.postgres_among("event_id", how.kind, id_checksum.among_literal(
        sorted(due_later), how.kind))) if due_later else ""
    source_query = f"SELECT {columns} FROM {source.sql} WHERE {among}{waiting}"
    return _Plan(lake, check, ids, f"postgres_query('{SOURCE_ALIAS}', {quote_literal(source_query)})", extra,
                 have, how.kind, len(later))
