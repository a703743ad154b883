"""Promotion: one staged batch -> one DuckLake transaction -> at most one snapshot.

Inside the transaction: quarantine the rows that cannot be loaded (:mod:`.validate`),
deduplicate the rest on ``event_id`` (keeping the newest ``created_at``), drop rows whose id
the lake already holds (wherever it is dated: one read of the lake's id column), insert the
rest, append the state row and set the commit message.
Promoters of one table are serialized by the ``promote`` lock (:mod:`.locks`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

import duckdb

from pipeline import staging
from pipeline.columns import OPTIONAL_LAKE_TYPES
from pipeline.id_checksum import IdKind, duckdb_identity, duckdb_key
from pipeline.lake import batches, tombstones, validate
from pipeline.lake.schema import INLINING_COLUMNS, events_column_types, insert_columns_sql, without_inlining
from pipeline.lake.session import LakeTable
from pipeline.progress import Progress
from pipeline.promote import schema_changes, zero_copy
from pipeline.promote.commit import LakeCommit
from pipeline.source.window import parse_iso
from pipeline.sqltext import one_row, quote_ident, quote_literal
from pipeline.staging import LakeFile, Manifest, StagedBatch

log = logging.getLogger(__name__)
RECONCILE_ENGINE = "reconcile"  # the manifest engine of backfill batches (pipeline.load.reconcile)


def insert_sql(table: LakeTable, have: Mapping[str, str], kind: IdKind, batch_has_duplicates: bool = True,
               extra_columns: dict[str, str] | None = None, erased: str | None = None) -> str:
    """Insert the batch's new loadable rows: one per id (only when the batch repeats ids: the
    window function costs a sort), anti-joined with every lake row, wherever it is dated. An id
    the lake holds is never inserted again: a source may move a loaded row (an UPDATE of its
    event_timestamp) into a later window, and a source without a unique index may send an id
    again. The whole lake's id column costs ~0.06 s against 10M rows for a 1k-row batch
    (bench/bench_antijoin.py); the batch is the join's build side. ``kind``: the table's key
    (:func:`key_kind`). ``erased``: the table's erased identities (:func:`.tombstones.erased_relation`),
    never loaded again (None: it has none)."""
    identity = duckdb_identity("s.event_id", kind)
    never_again = f"\n    ANTI JOIN {erased} erased ON erased.identity = {identity}" if erased else ""
    new_rows = f"""(
    SELECT * FROM ({validate.loadable_sql(batch_has_duplicates, extra_columns=extra_columns, id_kind=kind)}) s
    ANTI JOIN (SELECT {duckdb_key("event_id", kind)} AS event_id FROM {table.rows}) existing
           ON existing.event_id = s.event_id{never_again})"""
    return insert_columns_sql(table, have, new_rows, extra_columns or {})


def key_kind(table: LakeTable, manifest: Manifest) -> IdKind:
    """The batch's key as its plan read it from the source and the lake; for a batch staged before
    keys had kinds, as the lake's id column holds it (read only then)."""
    return IdKind(manifest.id_kind) if manifest.id_kind else table.id_kind()


class Outcome(StrEnum):
    """What promoting one batch came to (equal to its words, which logs and JSON carry)."""

    COMMITTED = "committed"  # rows inserted, one snapshot
    NO_NEW_ROWS = "no new rows"  # every staged row was in the lake already: recorded, no snapshot
    ALREADY_PROMOTED = "already promoted"  # this batch was promoted before (a rerun)
    SETTLED_ELSEWHERE = "settled by another process"  # another process promoted it meanwhile
    EMPTY = "empty"  # nothing was staged

    @property
    def moves_the_watermark(self) -> bool:
        return self in (Outcome.COMMITTED, Outcome.NO_NEW_ROWS)


@dataclass(frozen=True)
class PromotionResult:
    batch_id: str
    rows_staged: int
    rows_inserted: int
    rows_duplicate: int
    snapshot_id: int | None
    seconds: float
    outcome: Outcome
    max_event_timestamp: datetime | None = None  # the watermark this batch committed
    rows_quarantined: int = 0  # newly quarantined (a bad row the look-back re-reads counts once)
    files_registered: int = 0  # zero-copy: Spark's files the lake took as they were

    def describe(self) -> str:
        if self.outcome is Outcome.COMMITTED:
            quarantined = f", {self.rows_quarantined} quarantined" if self.rows_quarantined else ""
            registered = f" ({self.files_registered} Spark files registered)" if self.files_registered else ""
            return (f"batch {self.batch_id}: {self.rows_staged} staged, {self.rows_inserted} "
                    f"inserted{registered}, {self.rows_duplicate} duplicates{quarantined} -> snapshot "
                    f"{self.snapshot_id} ({self.seconds:.2f}s)")
        return f"batch {self.batch_id}: {self.outcome} ({self.rows_staged} staged), no snapshot"


def promote_together(group: str, members: list[tuple[LakeTable, StagedBatch]],
                     image: Sequence[str] = ()) -> list[PromotionResult]:
    """Staged batches (each with its table's view of one lake session) in **one** lake transaction
    — one snapshot — or none of them: a group, one plan's batches across its tables (one image of
    the source at the plan's instant; SOURCE_TABLE's one table is an image of one). ``image``: every
    lake table of that image, those without rows this time too, recorded with the commit (the
    tearing rule reads it: :func:`pipeline.lake.batches.loaded_with`). Through the lake's one
    commit (:class:`~pipeline.promote.commit.LakeCommit`: each table's promote lock in table order,
    fencing, the snapshot found by its own commit). Results in the members' order; their staging
    folders are removed once settled."""
    started = time.monotonic()
    with LakeCommit([lake for lake, _ in members]) as commit:
        results = _promote_locked(commit, group, members, started, image)
    for (lake, batch), result in zip(members, results, strict=True):
        _settle(lake, batch, result)
        log.info("%s: %s", lake.name, result.describe())
    return results


def _settle(table: LakeTable, batch: StagedBatch, result: PromotionResult) -> None:
    """A settled batch's staging folder goes, and Spark's files of one promoted by copy."""
    staging.remove_batch(batch.folder)
    if batch.lake_files and result.outcome.moves_the_watermark and not result.files_registered:
        # promoted by copy: its files were never registered (after the manifest is gone, so a
        # crash in between leaves orphans for maintenance, never a batch missing its files)
        zero_copy.remove_files(batch.lake_files, table.table_folder)


def _result(started: float, batch_id: str, outcome: Outcome, staged: int = 0, inserted: int = 0,
            snapshot: int | None = None, max_ts: datetime | None = None, quarantined: int = 0,
            registered: int = 0) -> PromotionResult:
    return PromotionResult(batch_id, staged, inserted, staged - inserted - quarantined, snapshot,
                           time.monotonic() - started, outcome, max_ts, quarantined, registered)


def _promote_locked(commit: LakeCommit, group: str, members: list[tuple[LakeTable, StagedBatch]],
                    started: float, image: Sequence[str]) -> list[PromotionResult]:
    result = functools.partial(_result, started)

    # all or none: a group's batches are recorded in one transaction, so one recorded means all were
    if any(batches.is_recorded(lake.lake, batch.batch_id) for lake, batch in members):
        return [result(batch.batch_id, Outcome.ALREADY_PROMOTED, batch.manifest.row_count)
                for _, batch in members]
    if not all(staging.is_complete(batch.folder) for _, batch in members):
        return [result(batch.batch_id, Outcome.SETTLED_ELSEWHERE, batch.manifest.row_count)
                for _, batch in members]
    contents = [_contents(lake, batch) if batch.file_uris() or batch.lake_files else None
                for lake, batch in members]
    staged = [c.staged if c else batch.manifest.rows_seen
              for c, (_, batch) in zip(contents, members, strict=True)]
    if not any(c is not None and c.staged for c in contents):  # no transaction, no snapshot
        return [result(batch.batch_id, Outcome.NO_NEW_ROWS if rows else Outcome.EMPTY, rows)
                for (_, batch), rows in zip(members, staged, strict=True)]
    message, info = _commit_text(group, members, contents, staged)
    info["image"] = sorted({*image, *(lake.name for lake, _ in members)})
    written: list[tuple[int, int]] = []
    meter = Progress(f"promoting group {group}")
    with meter.ticking(), commit.transaction(message, info) as tx:
        for (lake, batch), content in zip(members, contents, strict=True):
            if content is None or content.staged == 0:
                written.append((0, 0))
                continue
            inserted, quarantined = _write(lake, batch, content, meter)
            written.append((inserted, quarantined))
            if inserted or quarantined:
                fresh = _freshness(lake.lake.con, content.uris(), batch.manifest.arrived_after)
                _record(lake, batch, content, inserted, quarantined, started, fresh)
        changed = any(inserted or quarantined for inserted, quarantined in written)
        if not changed:
            tx.rollback()  # leave the lake (and its snapshot list) alone
        else:
            meter.step("committing")
    meter.finish(sum(staged), f"{sum(i for i, _ in written):,} new" if changed else "nothing new")
    results = []
    for (_, batch), content, rows, (inserted, quarantined) in zip(members, contents, staged, written,
                                                                  strict=True):
        if inserted or quarantined:
            assert content is not None
            results.append(result(batch.batch_id, Outcome.COMMITTED, rows, inserted, commit.snapshot_id,
                                  content.max_ts, quarantined, len(content.lake_files)))
        else:
            results.append(result(batch.batch_id, Outcome.NO_NEW_ROWS if rows else Outcome.EMPTY, rows))
    return results


@dataclass(frozen=True)
class _Contents:
    """What a batch holds, counted before its transaction: the files to copy, Spark's files to
    register, and the rows by kind."""

    files: list[str]  # staged Parquet read by the copy path
    copy_reason: str | None  # why rows go through the copy path (None: all of Spark's files registered)
    lake_files: list[LakeFile]  # zero-copy: registered as they are
    registered: int  # the rows of lake_files
    staged: int  # every row, including those seen in the lake already (duplicates)
    loadable: int
    invalid: int
    has_duplicates: bool
    min_ts: datetime | None
    max_ts: datetime | None
    schema: schema_changes.Pending = schema_changes.NOTHING  # the source's changes the commit follows

    @property
    def lake_uris(self) -> list[str]:
        return [str(f["uri"]) for f in self.lake_files]

    def uris(self) -> list[str]:
        return self.files + self.lake_uris


def _contents(table: LakeTable, batch: StagedBatch) -> _Contents:
    """Count the batch's rows. Spark's files go through the copy path instead when another run
    committed rows after this batch's ids were checked, or when the lake holds one of their ids
    outside the time range Spark checked (they would repeat it); they are deleted after, like
    staged files: the safety checks zero-copy keeps at promotion."""
    manifest = batch.manifest
    files, lake_files, copy_reason = batch.file_uris(), batch.lake_files, manifest.copy_reason
    fallback = None
    if lake_files and zero_copy.inserted_since(table, manifest.lake_snapshot or 0):
        fallback = "the lake took rows after this batch's ids were checked"
    elif lake_files and zero_copy.held_elsewhere(table, [str(f["uri"]) for f in lake_files]):
        # Spark checked the ids the lake holds in the batch's time range only
        fallback = "the lake holds some of its ids under another event_timestamp (moved in the source)"
    elif lake_files and (lacking := zero_copy.columns_lacking(table, str(lake_files[0]["uri"]))):
        fallback = (f"its files lack the table's column(s) {', '.join(lacking)}, made after they were "
                    "written (copy promotion fills them)")
    if fallback is not None:
        log.info("batch %s: %s; promoting it by copy", batch.batch_id, fallback)
        files, lake_files, copy_reason = files + [str(f["uri"]) for f in lake_files], [], fallback
    # the other columns as promotion casts them: the lake table's type of each it has already, once
    # the source's schema changes are followed
    lake_types = functools.cache(lambda: events_column_types(table))  # read once, when asked
    schema = schema_changes.pending(table, manifest, lake_types)
    existing = schema.types(lake_types()) if manifest.extra_columns else {}
    extra = {name: existing.get(name, kind) for name, kind in (manifest.extra_columns or {}).items()}
    stats = validate.batch_stats_sql(extra, id_kind=key_kind(table, batch.manifest))
    staged, loadable, distinct_ids, min_ts, max_ts, invalid = (
        one_row(table.lake.execute(stats, {"files": files})) if files else (0, 0, 0, None, None, 0))
    registered = sum(int(f["rows"]) for f in lake_files)
    min_ts, max_ts = _span([min_ts, max_ts, *(parse_iso(str(f[k])) for f in lake_files
                                              for k in ("min_event_timestamp", "max_event_timestamp"))])
    # the watermark never passes the window: rows its plan read with their transactions dated after
    # it (pipeline.load.plan.whole_transactions) are in no proven range yet
    if max_ts is not None and max_ts > manifest.window.upper:
        max_ts = manifest.window.upper
    return _Contents(files, copy_reason if files else None, lake_files, registered,
                     staged + registered + manifest.rows_seen, loadable, invalid,
                     distinct_ids < loadable, min_ts, max_ts, schema)


def _commit_text(group: str, members: list[tuple[LakeTable, StagedBatch]],
                 contents: list[_Contents | None], staged: list[int]) -> tuple[str, dict[str, object]]:
    """The snapshot's commit message and its extra info (what ``--status`` and tests read): the
    group's, naming each table's batch, and under ``tables`` each batch's own (its window, engine,
    files registered, proof and why it was copied)."""
    verb = ("reconcile" if all(batch.manifest.engine == RECONCILE_ENGINE for _, batch in members)
            else "promote")
    late = ", backfill late events" if verb == "reconcile" else ""
    message = f"{verb} group {group}: " + ", ".join(
        f"{lake.name} {rows} row(s){late} window {batch.manifest.window.brief()}"
        for (lake, batch), rows in zip(members, staged, strict=True))
    return message, {"group": group,
                     "batches": {lake.name: batch.batch_id for lake, batch in members},
                     "rows_staged": {lake.name: rows
                                     for (lake, _), rows in zip(members, staged, strict=True)},
                     "tables": {lake.name: _batch_info(batch, content)
                                for (lake, batch), content in zip(members, contents, strict=True)}}


def _batch_info(batch: StagedBatch, content: _Contents | None) -> dict[str, object]:
    manifest = batch.manifest
    return {"batch_id": batch.batch_id, "engine": manifest.engine,
            "window_low": manifest.window_low, "window_upper": manifest.window_upper,
            "rows_staged": content.staged if content else manifest.rows_seen,
            "files_registered": len(content.lake_files) if content else 0,
            **({"proof": {"source_ids": manifest.source_ids,
                          "source_id_checksum": manifest.source_id_checksum}}
               if manifest.source_ids is not None else {}),
            **({"copy_reason": content.copy_reason} if content and content.copy_reason else {})}


def _write(table: LakeTable, batch: StagedBatch,
           contents: _Contents, meter: Progress) -> tuple[int, int]:
    """Inside the batch's transaction: quarantine, add drifted columns, insert, register.
    Returns (rows inserted or registered, rows newly quarantined)."""
    files, quarantined, inserted = contents.files, 0, 0
    # the optional columns the source has (one it gained since the lake table was made) and the
    # columns it added join with their first rows; one read of the lake table's columns serves all
    absent, extra = batch.manifest.absent or (), batch.manifest.extra_columns or {}
    schema_changes.apply(table, batch.manifest, contents.schema)  # renames and drops, before any add
    optional = {name: kind for name, kind in OPTIONAL_LAKE_TYPES.items() if name not in absent}
    have = add_columns(table, {**optional, **extra}, batch.manifest.extra_defaults or {})
    lake_extra = {name: have[name] for name in extra}
    kind = key_kind(table, batch.manifest)
    rejected = validate.rejected_sql(contents.invalid > 0, contents.has_duplicates, lake_extra, id_kind=kind)
    if rejected is not None:
        meter.step("quarantining rows that cannot load")
        into_quarantine = validate.quarantine_sql(table.lake.quarantine_table, rejected, lake_extra,
                                                  tombstones.erased_relation(table), id_kind=kind)
        quarantined = one_row(table.lake.execute(into_quarantine,
                                                 {"files": files, "batch_id": batch.batch_id,
                                                  "table_name": table.name}))[0]
    if contents.loadable:
        meter.step("inserting new rows" + (" (dropping duplicates)" if contents.has_duplicates else ""))
        insert = insert_sql(table, have, kind, contents.has_duplicates, lake_extra,
                            tombstones.erased_relation(table))
        inserted = one_row(table.lake.execute(insert, {"files": files}))[0]
    if contents.lake_files:
        meter.step(f"registering {len(contents.lake_files)} file(s)")
        zero_copy.register(table, contents.lake_uris)
        inserted += contents.registered
    return inserted, quarantined


def _freshness(con: duckdb.DuckDBPyConnection, files: list[str],
               arrived_after: str | None) -> tuple[float | None, float | None]:
    """Seconds from arrival to now (the commit, a moment later) of the batch's rows that arrived
    after the earlier plan's mark — p50 and p95; none for a batch that is not a steady load."""
    if arrived_after is None or not files:
        return None, None
    row = one_row(con.execute(
        "SELECT approx_quantile(epoch($now) - epoch(created_at), [0.5, 0.95]) "
        "FROM read_parquet($files, union_by_name => true) WHERE created_at > $after",
        {"now": datetime.now(UTC), "files": files, "after": parse_iso(arrived_after)}))[0]
    return (float(row[0]), float(row[1])) if row and row[0] is not None else (None, None)


def _record(table: LakeTable, batch: StagedBatch,
            contents: _Contents, inserted: int, quarantined: int, started: float,
            freshness: tuple[float | None, float | None]) -> None:
    """The batch's state row, in its transaction: the watermark moves with the data."""
    manifest, staged = batch.manifest, contents.staged
    batches.record(table.lake, batches.BatchRecord(
        batch_id=batch.batch_id, table_name=table.name, engine=manifest.engine,
        window_low=manifest.window.low, window_upper=manifest.window.upper,
        rows_staged=staged, rows_inserted=inserted, rows_duplicate=staged - inserted - quarantined,
        min_event_timestamp=contents.min_ts, max_event_timestamp=contents.max_ts,
        extract_seconds=manifest.extract_seconds, promote_seconds=time.monotonic() - started,
        staged_at=datetime.fromisoformat(manifest.created_at), promoted_at=datetime.now(UTC),
        arrival_mark=parse_iso(manifest.arrival_mark),
        freshness_p50=freshness[0], freshness_p95=freshness[1],
        rows_behind_mark=manifest.rows_behind_mark or None, source=manifest.source,
        source_ids=manifest.source_ids, source_id_checksum=manifest.source_id_checksum,
        snapshot_xmin=manifest.snapshot_xmin, backfill=manifest.backfill or None,
        source_filenode=manifest.source_filenode))


def _span(values: list[datetime | None]) -> tuple[datetime | None, datetime | None]:
    present = [v for v in values if v is not None]
    return (min(present), max(present)) if present else (None, None)


def add_columns(table: LakeTable, extra_columns: dict[str, str],
                defaults: Mapping[str, str] | None = None) -> dict[str, str]:
    """Schema drift: add the columns the source gained to the lake table, inside the batch's
    transaction (the new columns and the first rows carrying them are one snapshot); one the
    source added with a default (``defaults``: its value as staged) with that value for the rows
    loaded before, as the source's older rows hold it. Returns the lake table's columns with
    their types, the added ones included (an existing column keeps its type)."""
    existing = events_column_types(table)
    for name, kind in extra_columns.items():
        if name not in existing:
            log.info("schema drift: adding column %s %s to %s", name, kind, table.events_table)
            value = (defaults or {}).get(name)
            castable = value is not None and one_row(table.lake.execute(
                f"SELECT TRY_CAST(? AS {kind}) IS NOT NULL", [value]))[0]
            default = f" DEFAULT {quote_literal(value)}" if castable and value is not None else ""
            if name.lower() in INLINING_COLUMNS:
                without_inlining(table)
            table.lake.execute(
                f"ALTER TABLE {table.events_table} ADD COLUMN {quote_ident(name)} {kind}{default}")
    return {**extra_columns, **existing}
