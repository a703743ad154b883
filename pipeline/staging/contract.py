"""The staging contract: ``STAGING_PATH/<table>/batch_id=<id>/*.parquet`` + ``_manifest.json``.

The same on a folder and on object storage (:mod:`.location` hides which).

The manifest is written last (atomically): a folder without one is an
incomplete batch and is never promoted.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, TypedDict

from pipeline.source.window import Window, iso, parse_iso
from pipeline.storage.folder import Folder

MANIFEST = "_manifest.json"
PREFIX = "batch_id="
FAILED = "_failed"  # STAGING_PATH/<table>/_failed/batch_id=<id>: batches set aside
FAILURE = "_failure.json"
RUNNING = "_running"  # STAGING_PATH/<table>/_running/<batch id>.json: which process is extracting it


def new_batch_id(now: datetime | None = None) -> str:
    """Sortable by creation time, unique across processes: ``20261121T200102123456Z-1a2b3c4d``."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{now:%Y%m%dT%H%M%S%fZ}-{secrets.token_hex(4)}"


class LakeFile(TypedDict):
    """A Parquet file Spark wrote into the lake's day folders (zero-copy), as a manifest lists it:
    registered as it is at promotion."""

    uri: str
    rows: int
    min_event_timestamp: str  # ISO instants, from the file's footer
    max_event_timestamp: str


@dataclass(frozen=True)
class Manifest:
    """What a complete staged batch holds."""

    batch_id: str
    table: str
    engine: str
    window_low: str | None
    window_upper: str
    row_count: int
    files: list[str]
    schema: list[dict[str, str]]
    extract_seconds: float
    created_at: str = field(default_factory=lambda: iso(datetime.now(UTC)))
    lake_id: str | None = None  # the lake this batch belongs to (ops.lake_identity)
    source: str | None = None  # where it was read: database and table, no credentials
    extra_columns: dict[str, str] | None = None  # columns the source added (as text) -> lake type
    # of those, the ones added with a default -> the value rows written before hold (as text)
    extra_defaults: dict[str, str] | None = None
    # zero-copy: files already in the lake's day folders, registered at promotion ({uri, rows,
    # min/max_event_timestamp}), and the lake snapshot whose ids they were checked against
    lake_files: list[LakeFile] | None = None
    lake_snapshot: int | None = None
    rows_seen: int = 0  # zero-copy: rows whose id the lake already held, counted and not staged
    copy_reason: str | None = None  # the plan promotes this batch by copy, and why (None: zero-copy)
    # arrival-aware windows (pipeline.source.arrivals): this plan's mark, recorded with the batch for
    # the next plan, and the earlier mark it read after (rows past it are new arrivals: freshness)
    arrival_mark: str | None = None
    arrived_after: str | None = None
    snapshot_xmin: int | None = None  # the plan snapshot's xmin, for the next plan (pipeline.source.window)
    rows_behind_mark: int = 0  # the plan's completeness check found these had arrived behind the mark
    # the source's event_id is unique (kept for older readers: promotion checks every id against
    # the whole lake)
    ids_unique: bool = True
    # the key's kind (pipeline.id_checksum.IdKind), as the plan read it from the source and the lake;
    # None: staged before keys had kinds (promotion reads it from the lake table's id type)
    id_kind: str | None = None
    # the proof: the ids the planner's snapshot held dated in the window's range (count and checksum,
    # pipeline.id_checksum); the lake must hold exactly those once the batch is in
    source_ids: int | None = None
    source_id_checksum: str | None = None
    # SOURCE_TABLES: the batches of one plan across tables (table -> batch id), promoted together in
    # one lake transaction or not at all; ``group`` names the plan
    group: str | None = None
    group_batches: dict[str, str] | None = None
    # the lake table's own columns that the staged event_id and event_timestamp go to (pipeline.columns)
    id_column: str = "event_id"
    time_column: str = "event_timestamp"
    absent: list[str] | None = None  # optional columns the source table lacks (staged as NULL, not loaded)
    backfill: bool = False  # a part of a table's catch-up: its window bounded by BACKFILL_BATCH_ROWS
    # the source columns the plan read, by identity: the table's oid and each column's attnum (a rename
    # keeps it), which promotion follows (pipeline.promote.schema_changes); None: staged before
    source_oid: int | None = None
    source_columns: dict[str, int] | None = None
    source_types: dict[str, str] | None = None  # and each one's Postgres type (udt name)
    source_filenode: int | None = None  # the table's storage (relfilenode), for the next plan

    @property
    def window(self) -> Window:
        return Window(low=parse_iso(self.window_low), upper=datetime.fromisoformat(self.window_upper))


@dataclass(frozen=True)
class StagedBatch:
    folder: Folder
    manifest: Manifest

    @property
    def batch_id(self) -> str:
        return self.manifest.batch_id

    def file_uris(self) -> list[str]:
        """The data files as DuckDB reads them (a path, or ``s3://…`` through httpfs)."""
        return [self.folder.uri(name) for name in self.manifest.files]

    @property
    def lake_files(self) -> list[LakeFile]:
        return self.manifest.lake_files or []


def pending_lake_files(table_dir: Folder) -> set[str]:
    """Lake files that staged batches (waiting, or set aside) will register: not orphans."""
    folders = table_dir.subdirs(PREFIX) + table_dir.child(FAILED).subdirs(PREFIX)
    manifests = [read_manifest(folder) for folder in folders]
    return {str(entry["uri"]) for m in manifests if m is not None for entry in m.lake_files or []}


def batch_dir(table_dir: Folder, batch_id: str) -> Folder:
    return table_dir.child(f"{PREFIX}{batch_id}")


def parquet_files(folder: Folder) -> list[str]:
    return folder.files(".parquet")


def _write_manifest(folder: Folder, manifest: Manifest) -> None:
    """Write ``_manifest.json`` atomically; from this moment the batch is complete."""
    folder.write_text(MANIFEST, json.dumps(asdict(manifest), indent=2))


def seal(folder: Folder, *, batch_id: str, table: str, engine: str, window: Window, row_count: int,
         files: list[str], **recorded: Any) -> StagedBatch:
    """Complete a batch whose files are in ``folder``: its manifest, written last. Every writer of
    batches (the engines' extraction, reconcile's backfill, the benches) seals through here;
    ``recorded`` takes the manifest's optional fields (schema, lake files, the plan's marks …)."""
    manifest = Manifest(batch_id=batch_id, table=table, engine=engine,
                        window_low=iso(window.low) if window.low else None, window_upper=iso(window.upper),
                        row_count=row_count, files=files, schema=recorded.pop("schema", []),
                        extract_seconds=recorded.pop("extract_seconds", 0.0), **recorded)
    _write_manifest(folder, manifest)
    return StagedBatch(folder=folder, manifest=manifest)


def read_manifest(folder: Folder) -> Manifest | None:
    text = folder.read_text(MANIFEST)
    return None if text is None else Manifest(**json.loads(text))


def is_complete(folder: Folder) -> bool:
    return folder.exists(MANIFEST)


def complete_batches(table_dir: Folder, lake_id: str | None = None) -> list[StagedBatch]:
    """Complete batches, oldest first (batch ids sort by creation time); with ``lake_id``, only
    that lake's (another configuration sharing the folder stages its own batches beside them)."""
    found = []
    for folder in table_dir.subdirs(PREFIX):
        manifest = read_manifest(folder)
        if manifest is not None and (lake_id is None or manifest.lake_id in (lake_id, None)):
            found.append(StagedBatch(folder=folder, manifest=manifest))
    return found


def remove_batch(folder: Folder) -> None:
    """Delete a batch folder; the manifest goes first so a half-deleted batch is incomplete."""
    folder.delete(MANIFEST)
    folder.remove()


def clean_stale(table_dir: Folder, older_than_seconds: float = 3600.0) -> list[Folder]:
    """Remove incomplete batches (no manifest) untouched for ``older_than_seconds``.

    A younger incomplete batch may belong to an extraction that is still running in
    another process, so it is left alone.
    """
    removed = []
    cutoff = time.time() - older_than_seconds
    for folder in table_dir.subdirs(PREFIX):
        if is_complete(folder):
            continue
        newest = folder.newest_change()
        if newest is not None and newest < cutoff:
            folder.remove()
            removed.append(folder)
    return removed


def _process_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (Linux), so a reused pid is not taken for the owner."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def claim_batch(table_dir: Folder, batch_id: str) -> None:
    """Record that this process is extracting ``batch_id`` (see :func:`abandoned_batches`)."""
    import os
    import socket

    table_dir.child(RUNNING).make(exist_ok=True)
    table_dir.child(RUNNING).write_text(f"{batch_id}.json", json.dumps(
        {"batch_id": batch_id, "host": socket.gethostname(), "pid": os.getpid(),
         "started": _process_start(os.getpid())}))


def release_batch(table_dir: Folder, batch_id: str) -> None:
    table_dir.child(RUNNING).delete(f"{batch_id}.json")


def running_batches(table_dir: Folder) -> list[str]:
    """Batches a process recorded it is extracting (:func:`claim_batch`), whether it still runs or not."""
    return [name.removesuffix(".json") for name in table_dir.child(RUNNING).files(".json")]


def abandoned_batches(table_dir: Folder) -> list[str]:
    """Batches whose extraction died with its process (SIGKILL, OOM, power): recorded by a process
    of this host that no longer runs. Their partial files can go at once instead of waiting an
    hour; a batch of a live process, or of another host, is left alone."""
    import socket

    found = []
    running = table_dir.child(RUNNING)
    for name in running.files(".json"):
        try:
            owner = json.loads(running.read_text(name) or "{}")
        except ValueError:
            continue
        if owner.get("host") != socket.gethostname() or not owner.get("pid"):
            continue
        started = _process_start(int(owner["pid"]))
        if started is None or started != owner.get("started"):
            found.append(str(owner["batch_id"]))
    return found


def set_aside(table_dir: Folder, batch: StagedBatch, error: str) -> Folder:
    """Move a batch that cannot be promoted to ``_failed/`` with the error, so later batches
    load; it is kept whole (manifest included) for :func:`restore_failed`."""
    target = table_dir.child(FAILED).child(batch.folder.name)
    batch.folder.move_to(target)
    target.write_text(FAILURE, json.dumps({"batch_id": batch.batch_id, "error": error,
                                           "set_aside_at": iso(datetime.now(UTC))}, indent=2))
    return target


def failed_batches(table_dir: Folder) -> list[dict[str, str]]:
    """The batches set aside, oldest first, each with its error."""
    found = []
    for folder in table_dir.child(FAILED).subdirs(PREFIX):
        text = folder.read_text(FAILURE)
        found.append(json.loads(text) if text else
                     {"batch_id": folder.name.removeprefix(PREFIX), "error": "unknown"})
    return found


def restore_failed(table_dir: Folder) -> list[str]:
    """Put every set-aside batch back in line (after the cause was fixed), with the batches of other
    tables' folders in its group (SOURCE_TABLES: a group is promoted whole); returns their ids."""
    restored = []
    for folder in table_dir.child(FAILED).subdirs(PREFIX):
        manifest = read_manifest(folder)
        folder.delete(FAILURE)
        folder.move_to(table_dir.child(folder.name))
        restored.append(folder.name.removeprefix(PREFIX))
        for table, batch_id in ((manifest.group_batches or {}) if manifest else {}).items():
            sibling_dir = table_dir.parent().child(table)
            sibling = batch_dir(sibling_dir.child(FAILED), batch_id)
            if sibling.exists(MANIFEST):
                sibling.delete(FAILURE)
                sibling.move_to(batch_dir(sibling_dir, batch_id))
                restored.append(batch_id)
    return restored


def is_set_aside(table_dir: Folder, batch_id: str) -> bool:
    """Is ``batch_id`` among the table's batches set aside (kept whole in ``_failed/``)?"""
    return batch_dir(table_dir.child(FAILED), batch_id).exists(MANIFEST)
