"""What erasures left behind (``--erase``, :mod:`pipeline.erase.erasure`): the erased rows'
identities, which no load brings back and every comparison counts as intentionally absent, and the
receipts that say what was erased without holding the value.

Both are ops tables of the lake (``ops.erased_ids``, ``ops.erasures``: sql/lake_events.sql). A lake
made before erasures has neither: it has erased nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import asdict, dataclass
from datetime import datetime
from uuid import UUID

from pipeline.lake.identity import table_names
from pipeline.lake.session import Lake, LakeTable
from pipeline.sqltext import quote_literal

ERASED_IDS = "erased_ids"
ERASURES = "erasures"
ERASING, DONE = "erasing", "done"  # a receipt's state: every copy gone only once done


def _has(lake: Lake, table: str) -> bool:
    return (lake.ops_schema, table) in table_names(lake)


def erased_identities(table: LakeTable) -> set[UUID]:
    """The identities (:func:`pipeline.id_checksum.duckdb_identity`) of every row erased from the table."""
    if not _has(table.lake, ERASED_IDS):
        return set()
    return {row[0] for row in table.lake.execute(
        f"SELECT DISTINCT identity FROM {table.lake.ops(ERASED_IDS)} WHERE table_name = ?",
        [table.name]).fetchall()}


def erased_relation(table: LakeTable) -> str | None:
    """A relation of the table's erased identities (column ``identity``), for a query to anti-join
    with; None when the table has none (the query stays as it was)."""
    if not _has(table.lake, ERASED_IDS) or not table.lake.execute(
            f"SELECT 1 FROM {table.lake.ops(ERASED_IDS)} WHERE table_name = ? LIMIT 1",
            [table.name]).fetchone():
        return None
    return (f"(SELECT DISTINCT identity FROM {table.lake.ops(ERASED_IDS)} "
            f"WHERE table_name = {quote_literal(table.name)})")


def value_hash(value: str, key: str) -> str:
    """The receipt's keyed hash of the erased value: HMAC-SHA256, hex. Whoever holds the key and a
    value can tell whether it was erased; the receipt alone does not give it back."""
    return hmac.new(key.encode(), value.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Receipt:
    """One erasure as ``ops.erasures`` records it (``--erasures``)."""

    erasure_id: str
    requested_at: datetime
    completed_at: datetime | None
    state: str
    subject_keys: dict[str, str]
    value_hash: str
    hash_key: str
    rows_erased: dict[str, int]
    ids_checksum: dict[str, dict[str, object]]
    snapshot_id: int | None
    snapshots_expired: list[int]
    files_rewritten: int
    bytes_written: int
    staged_batches_removed: int
    catalog_vacuum: str

    @property
    def done(self) -> bool:
        return self.state == DONE

    def as_dict(self) -> dict[str, object]:
        found = asdict(self)
        found["requested_at"] = self.requested_at.isoformat()
        found["completed_at"] = self.completed_at.isoformat() if self.completed_at else None
        return found

    def summary(self) -> str:
        rows = ", ".join(f"{table} {count}" for table, count in self.rows_erased.items()) or "no rows"
        when = self.completed_at or self.requested_at
        return (f"{self.erasure_id} {when:%Y-%m-%d %H:%M:%S%z} {self.state}: {rows}; value hash "
                f"{self.value_hash[:16]}… ({self.hash_key}); snapshot {self.snapshot_id}, "
                f"{len(self.snapshots_expired)} snapshot(s) expired, "
                f"{self.files_rewritten} file(s) rewritten"
                + ("" if self.catalog_vacuum in ("full", "") or self.catalog_vacuum.startswith("none")
                   else f"; catalog: {self.catalog_vacuum}"))


_JSON_COLUMNS = ("subject_keys", "rows_erased", "ids_checksum", "snapshots_expired")


def receipts(lake: Lake) -> list[Receipt]:
    """Every erasure's receipt, oldest first ([] for a lake that erased nothing)."""
    if not _has(lake, ERASURES):
        return []
    cursor = lake.execute(f"SELECT * FROM {lake.ops(ERASURES)} ORDER BY requested_at, erasure_id")
    names = [d[0] for d in cursor.description]
    found = []
    for row in cursor.fetchall():
        values = dict(zip(names, row, strict=True))
        for name in _JSON_COLUMNS:
            values[name] = json.loads(values[name]) if values[name] is not None else None
        found.append(Receipt(
            erasure_id=values["erasure_id"], requested_at=values["requested_at"],
            completed_at=values["completed_at"], state=values["state"],
            subject_keys=values["subject_keys"] or {}, value_hash=values["value_hash"],
            hash_key=values["hash_key"], rows_erased=values["rows_erased"] or {},
            ids_checksum=values["ids_checksum"] or {}, snapshot_id=values["snapshot_id"],
            snapshots_expired=values["snapshots_expired"] or [],
            files_rewritten=int(values["files_rewritten"] or 0),
            bytes_written=int(values["bytes_written"] or 0),
            staged_batches_removed=int(values["staged_batches_removed"] or 0),
            catalog_vacuum=values["catalog_vacuum"] or ""))
    return found
