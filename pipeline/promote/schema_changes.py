"""The lake follows the source's schema changes by column identity, in the batch's transaction.

A Postgres column keeps its number (``attnum``) when it is renamed, and a table keeps its oid
until it is dropped; names do neither. Each staged batch carries the columns its plan read, by
identity (:attr:`~pipeline.staging.Manifest.source_columns`), and the lake keeps, per table, the
last ones it followed (``ops.source_columns``). Promoting a batch compares the two, inside the
batch's transaction, so a change enters the lake in the snapshot of the first batch that carries it
and time travel to an earlier snapshot shows the old names and values (DuckLake renames and drops
columns in place, per snapshot):

- a column renamed (same number, another name) is renamed in the lake table: its rows keep their
  values under the new name, where a rename loaded as a new empty column left every earlier row
  "changed" for ``--verify``;
- a column dropped (its number gone) is dropped from the lake table's current schema: it is no
  longer the source's, and new rows would read NULL in it for ever;
- a table dropped and made again under its name (another oid) is said, and its columns are taken
  by name from then on (a number of the old table means nothing in the new one).

The id, time and optional event columns are not followed: their names are what the pipeline
reads, and a change of one is refused before anything is read (the id and time columns by
:func:`pipeline.source.shape.check_shape`, the event columns by :meth:`PlanCheck.refuse`, which
also holds SCHEMA_CHANGES=freeze to the columns followed).
A batch staged before the changes the lake already followed (promoted late) changes nothing.
Each change is logged, and kept in ``ops.schema_changes`` (``--status`` lists them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pipeline import logs
from pipeline.columns import OPTIONAL
from pipeline.errors import TerminalError
from pipeline.lake.session import LakeTable
from pipeline.settings import SchemaChanges
from pipeline.source.shape import SourceRelation
from pipeline.sqltext import quote_ident, quote_literal
from pipeline.staging import Manifest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchemaChange:
    """One change the lake followed: ``renamed`` (``column`` was ``before``), ``dropped`` or
    ``recreated`` (the table: ``before`` and ``after`` its oids)."""

    change: str
    column: str
    before: str | None = None
    after: str | None = None

    def describe(self, table: str) -> str:
        if self.change == "renamed":
            return (f"column {self.before} of {table} renamed to {self.column} in the source: renamed in "
                    "the lake")
        if self.change == "dropped":
            return (f"column {self.column} of {table} dropped in the source: dropped from the lake's current "
                    "schema (earlier snapshots keep it)")
        return (f"the source table {table} was dropped and made again (oid {self.before} -> {self.after}): "
                "its columns are followed by name from now on")


@dataclass(frozen=True)
class _Followed:
    """The source columns the lake last followed for a table (``ops.source_columns``)."""

    oid: int
    numbers: dict[int, str]  # attnum -> name
    batch_id: str
    types: dict[int, str]  # attnum -> Postgres type (udt name)


@dataclass(frozen=True)
class Pending:
    """What a batch's promotion changes in its lake table's columns, read before its transaction
    (under the promote lock) and applied in it (:func:`apply`): renames (the lake's column, its new
    name), drops, and whether the columns followed are recorded anew."""

    changes: tuple[SchemaChange, ...] = ()
    renames: tuple[tuple[str, str], ...] = ()
    drops: tuple[str, ...] = ()
    record: bool = False

    def types(self, lake: dict[str, str]) -> dict[str, str]:
        """The lake table's columns and types (``lake``) as they are once the changes are applied:
        what the batch's rows are cast to."""
        after = {name: kind for name, kind in lake.items() if name not in self.drops
                 and name not in (column for column, _ in self.renames)}
        return {**after, **{new: lake[column] for column, new in self.renames}}


NOTHING = Pending()


def pending(table: LakeTable, manifest: Manifest, lake_types: Callable[[], dict[str, str]]) -> Pending:
    """What changed in ``manifest``'s source columns since the lake last followed them
    (``lake_types``: the lake table's columns now, read only when a column moved)."""
    if manifest.source_oid is None or not manifest.source_columns:
        return NOTHING  # staged by a version that read no identities
    followed = _followed(table)
    if followed is not None and followed.batch_id > manifest.batch_id:
        return NOTHING  # staged before what the lake follows: its columns are older than the lake's
    current = _by_number(manifest.source_columns)
    record = followed is None or followed.numbers != current or followed.oid != manifest.source_oid
    if followed is None:
        return Pending(record=record)
    if followed.oid != manifest.source_oid:
        return Pending((SchemaChange("recreated", table.name, str(followed.oid), str(manifest.source_oid)),),
                       record=record)
    fixed = {table.id_column, table.time_column, *OPTIONAL}
    moved = [(before, after) for number, before in followed.numbers.items()
             if (after := current.get(number)) != before and before not in fixed and after not in fixed]
    lake = {name.lower(): name for name in lake_types()} if moved else {}
    moved = [(before, after) for before, after in moved if before.lower() in lake]  # else never loaded
    leaving = {before.lower() for before, _ in moved}
    changes, renames, drops = [], [], []
    for before, after in moved:
        if after is None:
            drops.append(lake[before.lower()])
            changes.append(SchemaChange("dropped", before))
        # a name the lake holds and keeps is that column's: the source's one of that name is added to
        # it by name; one renamed away too (names swapped) is free once it is
        elif after.lower() not in lake or after.lower() in leaving:
            renames.append((lake[before.lower()], after))
            changes.append(SchemaChange("renamed", after, before))
    return Pending(tuple(changes), tuple(renames), tuple(drops), record)


def apply(table: LakeTable, manifest: Manifest, changes: Pending) -> None:
    """Inside the batch's transaction: apply ``changes`` to ``table``, and record the batch's source
    columns as followed."""
    alter = f"ALTER TABLE {table.events_table}"
    for column in changes.drops:
        table.lake.execute(f"{alter} DROP COLUMN {quote_ident(column)}")
    # through names of their own first: a swap's second name is the first's until it is renamed
    for step, (column, _) in enumerate(changes.renames):
        table.lake.execute(f"{alter} RENAME COLUMN {quote_ident(column)} TO _el_renamed_{step}")
    for step, (_, new) in enumerate(changes.renames):
        table.lake.execute(f"{alter} RENAME COLUMN _el_renamed_{step} TO {quote_ident(new)}")
    for change in changes.changes:
        log.info("schema change: %s", change.describe(table.name), extra=logs.NOTABLE)
    if changes.record:
        _record(table, manifest, list(changes.changes))


def _followed(table: LakeTable) -> _Followed | None:
    rows = table.lake.execute(
        "SELECT source_oid, attnum, column_name, batch_id, source_type FROM "
        f"{table.lake.ops('source_columns')} WHERE table_name = {quote_literal(table.name)}").fetchall()
    if not rows:
        return None
    return _Followed(int(rows[0][0]), {int(row[1]): str(row[2]) for row in rows}, str(rows[0][3]),
                     {int(row[1]): str(row[4]) for row in rows if row[4] is not None})


def _record(table: LakeTable, manifest: Manifest, changes: list[SchemaChange]) -> None:
    columns, name = table.lake.ops("source_columns"), quote_literal(table.name)
    table.lake.execute(f"DELETE FROM {columns} WHERE table_name = {name}")
    numbered, types = manifest.source_columns or {}, manifest.source_types or {}
    table.lake.execute(f"INSERT INTO {columns} SELECT {name}, ?, unnest(?), unnest(?), unnest(?), ?",
                       [manifest.source_oid, list(numbered.values()), list(numbered),
                        [types.get(column) for column in numbered], manifest.batch_id])
    if changes:
        table.lake.execute(f"INSERT INTO {table.lake.ops('schema_changes')} "
                           "SELECT ?, ?, unnest(?), unnest(?), unnest(?), unnest(?), now()",
                           [table.name, manifest.batch_id, *(list(values) for values in zip(
                               *((c.change, c.column, c.before, c.after) for c in changes), strict=True))])


class SchemaFrozen(TerminalError):
    """A source table whose SCHEMA_CHANGES is freeze changed its columns: the load stops before
    reading anything."""


@dataclass(frozen=True)
class PlanCheck:
    """What a plan checks against the columns the lake follows, before anything is read: ``source``
    as the plan's snapshot holds it beside ``followed`` (read once, and only when a check asks: a
    contract other than evolve, or an event column the source lacks)."""

    source: SourceRelation
    followed: _Followed | None

    @classmethod
    def read(cls, table: LakeTable, source: SourceRelation, contract: SchemaChanges) -> PlanCheck:
        asks = contract is not SchemaChanges.EVOLVE or any(name in source.absent for name in OPTIONAL)
        return cls(source, _followed(table) if asks else None)

    def _same_table(self) -> bool:
        return self.followed is not None and self.followed.oid == self.source.oid

    def kept_names(self) -> set[str]:
        """The names the source gives the columns the lake follows by identity (a renamed one under
        its new name): what SCHEMA_CHANGES=discard_value keeps loading."""
        if self.followed is None or not self._same_table():
            return set()
        return {name for name, number in self.source.attnums.items() if number in self.followed.numbers}

    def refuse(self, contract: SchemaChanges) -> None:
        """SCHEMA_CHANGES=freeze: :class:`SchemaFrozen`, naming each change, when the source's columns
        are not the ones the lake follows (a table never promoted yet has none to compare with). Any
        contract: an event column the pipeline reads by name (``event_type``, ``details``,
        ``created_at``) that the source lacks now although the lake followed it, renamed or dropped,
        is refused by name: loading on turned it into NULLs under the old name (and a new column
        under the new one), typed payload keys and the views by event type reading nothing."""
        followed, source = self.followed, self.source
        if followed is None or source.oid is None:
            return
        current = _by_number(source.attnums)
        if contract is SchemaChanges.FREEZE and (seen := self._changes(followed, current)):
            raise SchemaFrozen(
                f"The source table {source.qualified} changed since the lake last loaded it: "
                f"{'; '.join(seen)}; its SCHEMA_CHANGES is freeze. Nothing was read, staged or promoted.",
                "Undo the change in the source, or let the lake follow it: SCHEMA_CHANGES=evolve (or the "
                "table's schema_changes=evolve in SOURCE_TABLES); then run again. Nothing is lost meanwhile.")
        if not self._same_table():
            return
        for number, name in followed.numbers.items():
            if name in OPTIONAL and name in source.absent:
                now = current.get(number)
                what = f"renamed to {now}" if now else "dropped"
                raise TerminalError(
                    f"The source column {source.qualified}.{name} was {what}: the pipeline reads {name} by "
                    "name (typed payload keys and the views by event type follow it). Nothing was read, "
                    "staged or promoted.",
                    f"Rename it back to {name}, or point the table at a view that names it {name}; then run "
                    "again. Nothing is lost meanwhile.")

    def _changes(self, followed: _Followed, current: dict[int, str]) -> list[str]:
        """Each way the source's columns (``current``: attnum -> name) differ from ``followed``."""
        source = self.source
        if not self._same_table():
            return [f"the table was dropped and made again (oid {followed.oid} -> {source.oid})"]
        seen = [f"{before} dropped" for number, before in followed.numbers.items() if number not in current]
        seen += [f"{before} renamed to {current[number]}" for number, before in followed.numbers.items()
                 if number in current and current[number] != before]
        seen += [f"{name} added" for number, name in current.items() if number not in followed.numbers]
        return seen + [f"{name} retyped {followed.types[number]} -> {source.types[name]}"
                       for number, name in current.items()
                       if followed.types.get(number) not in (None, source.types.get(name))]


def _by_number(columns: Mapping[str, int]) -> dict[int, str]:
    """attnum -> name, of columns by name -> attnum."""
    return {number: name for name, number in columns.items()}


@dataclass(frozen=True)
class FollowedChange:
    """A schema change the lake followed, as ``--status`` shows it: the snapshot whose commit carries
    it (None: that snapshot expired), and the column's name before and after."""

    table: str
    snapshot: int | None
    change: str
    column: str
    before: str | None
    after: str | None

    def as_dict(self) -> dict[str, object]:
        return {"snapshot": self.snapshot, "change": self.change, "column": self.column,
                "from": self.before, "to": self.after}

    def describe(self) -> str:
        moved = {"renamed": f"{self.before} -> {self.column}", "dropped": self.column,
                 "recreated": f"oid {self.before} -> {self.after}"}[self.change]
        return f"{self.table} {self.change} {moved} (snapshot {self.snapshot or 'expired'})"


def followed_changes(table: LakeTable) -> list[FollowedChange]:
    """The schema changes the lake followed for ``table``, oldest first (its ops table exists)."""
    rows = table.lake.execute(
        f"SELECT c.change, c.column_name, c.from_value, c.to_value, (SELECT min(s.snapshot_id) FROM "
        f"{table.lake.name}.snapshots() s WHERE contains(CAST(s.commit_extra_info AS VARCHAR), c.batch_id)) "
        f"FROM {table.lake.ops('schema_changes')} c WHERE c.table_name = {quote_literal(table.name)} "
        "ORDER BY c.changed_at").fetchall()
    return [FollowedChange(table.name, snapshot, change, column, before,
                           column if change == "renamed" else after)
            for change, column, before, after, snapshot in rows]
