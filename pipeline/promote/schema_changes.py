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
reads, and a change of one is refused before anything is read (:func:`pipeline.source.shape.check_shape`).
A batch staged before the changes the lake already followed (promoted late) changes nothing.
Each change is logged, and kept in ``ops.schema_changes`` (``--status`` lists them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pipeline import logs
from pipeline.columns import OPTIONAL
from pipeline.lake.identity import events_column_types
from pipeline.lake.session import LakeTable
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


def follow(table: LakeTable, manifest: Manifest) -> list[SchemaChange]:
    """Inside ``manifest``'s batch's transaction: apply to ``table`` what changed in its source's
    columns since the lake last followed them, and record the batch's as followed."""
    if manifest.source_oid is None or not manifest.source_columns:
        return []  # staged by a version that read no identities
    followed = _followed(table)
    if followed is not None and followed.batch_id > manifest.batch_id:
        return []  # staged before what the lake follows: its columns are older than the lake's
    current = {number: name for name, number in manifest.source_columns.items()}
    changes: list[SchemaChange] = []
    if followed is not None and followed.oid != manifest.source_oid:
        changes.append(SchemaChange("recreated", table.name, str(followed.oid), str(manifest.source_oid)))
    elif followed is not None:
        fixed = {table.id_column, table.time_column, *OPTIONAL}
        moved = [(before, after) for number, before in followed.numbers.items()
                 if (after := current.get(number)) != before and before not in fixed and after not in fixed]
        lake = {name.lower(): name for name in events_column_types(table)} if moved else {}
        for before, after in moved:
            if before.lower() not in lake:  # not loaded (SCHEMA_DRIFT=ignore)
                continue
            column = quote_ident(lake[before.lower()])
            if after is None:
                table.lake.execute(f"ALTER TABLE {table.events_table} DROP COLUMN {column}")
                changes.append(SchemaChange("dropped", before))
            elif after.lower() not in lake:  # else a column of that name is the lake's already: added by name
                table.lake.execute(
                    f"ALTER TABLE {table.events_table} RENAME COLUMN {column} TO {quote_ident(after)}")
                changes.append(SchemaChange("renamed", after, before))
    for change in changes:
        log.info("schema change: %s", change.describe(table.name), extra=logs.NOTABLE)
    if followed is None or changes or followed.numbers != current or followed.oid != manifest.source_oid:
        _record(table, manifest, changes)
    return changes


def _followed(table: LakeTable) -> _Followed | None:
    rows = table.lake.execute(
        f"SELECT source_oid, attnum, column_name, batch_id FROM {table.lake.ops('source_columns')} "
        f"WHERE table_name = {quote_literal(table.name)}").fetchall()
    if not rows:
        return None
    numbers = {int(number): str(name) for _, number, name, _ in rows}
    return _Followed(int(rows[0][0]), numbers, str(rows[0][3]))


def _record(table: LakeTable, manifest: Manifest, changes: list[SchemaChange]) -> None:
    columns, name = table.lake.ops("source_columns"), quote_literal(table.name)
    table.lake.execute(f"DELETE FROM {columns} WHERE table_name = {name}")
    table.lake.execute(f"INSERT INTO {columns} SELECT {name}, ?, unnest(?), unnest(?), ?",
                       [manifest.source_oid, list((manifest.source_columns or {}).values()),
                        list(manifest.source_columns or {}), manifest.batch_id])
    if changes:
        table.lake.execute(f"INSERT INTO {table.lake.ops('schema_changes')} "
                           "SELECT ?, ?, unnest(?), unnest(?), unnest(?), unnest(?), now()",
                           [table.name, manifest.batch_id, *(list(values) for values in zip(
                               *((c.change, c.column, c.before, c.after) for c in changes), strict=True))])


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
