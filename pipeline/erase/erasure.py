"""Forget a subject (``--erase VALUE``): remove every row whose SUBJECT_KEY holds the value from the
lake's tables and quarantine, from every snapshot time travel keeps, from every file under the data and
staging paths and from the catalog, so that no load brings the rows back, and leave a receipt.

DuckLake keeps a deleted row where it was: in its Parquet file (masked by a delete file), in the
catalog's inlined rows, and in every older snapshot that still lists them. So, one step after another:

1. **Commit** (one DuckLake transaction, under every table's promote lock, held to step 4): the tombstones
   (the rows' identities, never the value: :mod:`.tombstones`), the receipt in state ``erasing``,
   and the DELETE of the rows from each table and from ``ops.quarantine``. From this snapshot on,
   no current row is the subject's, and no load, reconcile or repair loads those ids again.
2. **Rewrite**: the tables' inlined rows are flushed to files, and every file holding a deleted row
   is rewritten without it: the rows of an events table's once, by an UPDATE keeping each row's first
   snapshot (:meth:`Erasure.keep_known_since`), the rest's by ``ducklake_rewrite_data_files``
   (``delete_threshold => 0``); each table's column bounds in the catalog are then made again from
   its files (:mod:`pipeline.erase.column_stats`: DuckLake would keep the subject's values there).
3. **Expire** exactly the snapshots that still list a file or an inlined row holding the subject (a
   snapshot is the whole lake's: DuckLake cannot expire one table's history; ``--dry-run`` says which
   versions go), then delete the files no snapshot lists any more, at once.
4. **Staging**: a staged batch holding the subject (waiting, or set aside) is removed whole; its rows
   are read again from the source, where the tombstones keep the subject's out.
5. **Catalog**: every DuckLake table of a Postgres catalog is vacuumed (``VACUUM FULL``: a deleted row's
   bytes, and every replaced version, stay in its pages until then), then ``pg_statistic`` (ANALYZE's
   old statistics); an SQLite catalog is vacuumed. 6. The receipt is marked ``done``, and the catalog
   vacuumed once more: the receipt's own commit wrote new versions after the first vacuum.

A request for a value a receipt names already, of which nothing is left, writes nothing (one request,
one receipt); without ERASURE_KEY an erasure is refused (a key the lake held, any reader could use).

A kill between steps leaves the commit of step 1 (the subject is gone from the current lake) and a
receipt in state ``erasing``; the next ``--erase`` completes it first, by the tombstones' ids.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from uuid import UUID

import duckdb

from pipeline import actions, staging
from pipeline.erase import column_stats, subject_rows
from pipeline.erase.subject_rows import QUARANTINE, Holding, Scrubbed
from pipeline.errors import ConfigError
from pipeline.id_checksum import IdSum, duckdb_identity, duckdb_key, of_ids
from pipeline.lake import known_since, tombstones
from pipeline.lake.identity import events_column_types, table_names
from pipeline.lake.maintain import own_orphans
from pipeline.lake.session import Lake, LakeTable
from pipeline.lake.transaction import transaction
from pipeline.promote.commit import LakeCommit
from pipeline.settings import ResolvedSettings
from pipeline.source.connect import connect
from pipeline.source.shape import IdShape, SourceRelation
from pipeline.sqltext import one_row, quote_ident, quote_literal

log = logging.getLogger(__name__)
# files moved per commit keeping their rows' first snapshots: an UPDATE's memory grows with the rows it
# moves (at 10M rows, 424 MB of files: 1.3 GiB peak in one commit; bench/bench_erasure.py)
MOVE_BYTES = 128 * 2**20


@dataclass
class TableErasure:
    """What an erasure found (and removed) in one table."""

    key: str
    rows: int = 0
    quarantined: int = 0
    ids: IdSum = field(default_factory=IdSum)
    files: int = 0  # data files (current) holding its rows: rewritten
    inlined: int = 0  # of its rows, those held inlined in the catalog
    not_loaded: int = 0  # rows of the subject the source holds that no load took yet: never will

    def as_dict(self) -> dict[str, object]:
        return {"key": self.key, "rows": self.rows, "quarantined": self.quarantined,
                "ids": self.ids.as_dict(),
                "files": self.files, "inlined_rows": self.inlined, "not_loaded": self.not_loaded}


@dataclass
class ErasureReport:
    """``--erase``'s outcome (with ``dry_run``: what it would do)."""

    dry_run: bool
    erasure_id: str
    value_hash: str
    hash_key: str
    tables: dict[str, TableErasure] = field(default_factory=dict)
    snapshot_id: int | None = None
    snapshots_expired: list[int] = field(default_factory=list)
    snapshots_kept: int = 0
    files_rewritten: int = 0
    bytes_written: int = 0
    staged_batches_removed: int = 0
    completed_before: list[str] = field(default_factory=list)  # interrupted erasures completed first
    orphans_deleted: int = 0  # files no snapshot ever listed (an interrupted write's) that held the subject
    catalog_vacuum: str = ""  # what the catalog's vacuum did (vacuum_catalog); "" before it ran
    already_erased: str | None = None  # the receipt of an earlier erasure of the value: nothing written
    snapshots_before: int | None = None  # the latest snapshot before the erasure's own commits
    # receipts completed but for the catalog's vacuum: erasure id -> what the receipt records (finish())
    finishing: dict[str, dict[str, object]] = field(default_factory=dict, repr=False)
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(t.rows + t.quarantined for t in self.tables.values())

    def as_dict(self) -> dict[str, object]:
        return {"dry_run": self.dry_run, "erasure_id": self.erasure_id, "value_hash": self.value_hash,
                "hash_key": self.hash_key, "rows": self.rows,
                "tables": {name: t.as_dict() for name, t in self.tables.items()},
                "snapshot_id": self.snapshot_id, "snapshots_expired": self.snapshots_expired,
                "snapshots_kept": self.snapshots_kept, "files_rewritten": self.files_rewritten,
                "bytes_written": self.bytes_written, "staged_batches_removed": self.staged_batches_removed,
                "completed_before": self.completed_before, "orphans_deleted": self.orphans_deleted,
                "catalog_vacuum": self.catalog_vacuum, "already_erased": self.already_erased,
                "own_snapshots_expired": self.own_snapshots_expired,
                "files_held": self.files_held,
                "seconds": round(self.seconds, 3)}

    @property
    def own_snapshots_expired(self) -> int:
        """Of the snapshots expired, those the erasure itself committed before its rewrite (its
        deletes, flushes and moves list the old files too): a dry run cannot number them yet."""
        if self.snapshots_before is None:
            return 0
        return sum(1 for v in self.snapshots_expired if v > self.snapshots_before)

    @property
    def files_held(self) -> int:
        """Data files of the tables holding the subject's current rows: each rewritten without them."""
        return sum(t.files for t in self.tables.values())

    def describe(self) -> str:
        if self.already_erased is not None:
            left = ("nothing of the subject is left in the lake, its history, its quarantine or the "
                    "source's rows not loaded yet")
            if self.already_erased in self.completed_before:
                return (f"completed the interrupted erasure of this value (receipt {self.already_erased}, "
                        f"snapshot {self.snapshot_id}): {left}; no second receipt written")
            return (f"already erased (receipt {self.already_erased}, snapshot {self.snapshot_id}): {left}; "
                    "nothing was written")
        rows = ", ".join(_table_words(name, t) for name, t in self.tables.items())
        expired = self.snapshots_expired
        was = "would be" if self.dry_run else "was"
        own = self.own_snapshots_expired
        lost = (f"time travel to {len(expired) - own} snapshot(s) {_versions(expired[:len(expired) - own])} "
                f"{was} lost, for every table of the lake (DuckLake expires snapshots lake-wide; these are "
                f"the only ones that list the subject's rows); {self.snapshots_kept} other snapshot(s) kept"
                if len(expired) > own else "no snapshot's time travel lost")
        if self.dry_run:
            lost += (" — and the erasure's own snapshots before its rewrite (its deletes, flushes and "
                     "moves), which list the same files; a load committed before the erasure runs may add "
                     "to both")
        elif own:
            lost += f", and the erasure's own {own} snapshot(s) before its rewrite"
        if not (self.rows or any(t.not_loaded for t in self.tables.values()) or expired):
            rows += (" — nothing of the subject was found: the value is compared exactly, as text (case, "
                     "spaces and spelling count)")
        if self.dry_run:
            return (f"dry run, nothing changed: would erase {rows}; {self.files_held} file(s) holding them "
                    f"would be rewritten without them; {lost}")
        parts = [f"erased {rows} (receipt {self.erasure_id}, snapshot {self.snapshot_id})", lost,
                 f"{self.files_held} file(s) holding them rewritten into {self.files_rewritten} "
                 f"({self.bytes_written:,} bytes), {self.staged_batches_removed} staged batch(es) removed"]
        if self.orphans_deleted:
            parts.append(f"{self.orphans_deleted} file(s) of interrupted writes deleted")
        if self.catalog_vacuum not in ("full", "") and not self.catalog_vacuum.startswith("none"):
            parts.append(f"catalog: {self.catalog_vacuum}")
        return "; ".join([*parts, f"{self.seconds:.1f}s"])


def _table_words(name: str, table: TableErasure) -> str:
    quarantined = f" + {table.quarantined} quarantined" if table.quarantined else ""
    inlined = f" and {table.inlined} inlined" if table.inlined else ""
    waiting = (f", and {table.not_loaded} the source holds that were not loaded yet" if table.not_loaded
               else "")
    return f"{name} {table.rows} row(s){quarantined} in {table.files} file(s){inlined}{waiting}"


def _versions(versions: list[int]) -> str:
    return f"{versions[0]}-{versions[-1]}" if len(versions) > 1 else str(versions[0])


class Erasure:
    """One erasure of one value (``None``: completing an interrupted one, by its tombstones alone)
    across the image's tables with a SUBJECT_KEY, in a lake session the caller holds, which this
    object neither opens nor closes."""

    def __init__(self, lake: Lake, settings: ResolvedSettings, erasure_id: str, value: str | None,
                 step: Callable[[str], None] = lambda _: None) -> None:
        self.lake, self.settings, self.erasure_id, self.step = lake, settings, erasure_id, step
        self.params: dict[str, object] = {"value": value, "erasure": erasure_id}
        present = table_names(lake)
        erased = (f"(SELECT identity FROM {lake.ops(tombstones.ERASED_IDS)} WHERE erasure_id = $erasure)"
                  if (lake.ops_schema, tombstones.ERASED_IDS) in present else "(SELECT NULL::UUID)")
        self.keys = subject_rows.subject_keys(settings)
        self.tables: dict[str, tuple[LakeTable, Scrubbed, Scrubbed]] = {}
        self.from_source: dict[str, set[UUID]] = {}  # read_source(): identities of the source's rows
        for number, spec in enumerate(settings.tables):
            if spec.name not in self.keys or ("main", spec.name) not in present:
                continue
            table, key = lake.table_of(spec), self.keys[spec.name]
            kind, pattern = table.id_kind(), f"unreadable_{number}"
            self.params[pattern] = subject_rows.unreadable_pattern(value, key)
            self.tables[spec.name] = (table, subject_rows.of_table(table, key, kind, erased),
                                      subject_rows.of_quarantine(table, key, kind, erased, pattern))
        if not self.tables:
            raise ConfigError(f"No table with a SUBJECT_KEY ({', '.join(self.keys)}) has been loaded yet: "
                              "nothing was erased.", f"Erase once the tables are loaded ({actions.RUN}).")

    def read_source(self) -> None:
        """The identities of the subject's rows the source holds, per table (:attr:`from_source`).
        A source that cannot be read stops the erasure before anything changes: its rows of the
        subject that no load took yet would be loaded after it."""
        value = self.params["value"]
        if value is None:
            return
        with connect(self.settings.source_dsn) as conn:
            for name, (table, _, _) in self.tables.items():
                spec = next(t for t in self.settings.tables if t.name == name)
                relation = SourceRelation.of(conn, spec)
                kind = IdShape.read(conn, relation, table.id_type()).kind
                self.from_source[name] = subject_rows.in_source(conn, relation, self.keys[name], kind,
                                                                str(value))

    @property
    def locked(self) -> list[LakeTable]:
        """The lake tables whose promote locks it holds throughout (:class:`LakeCommit`): every
        table of the image, not only those it deletes from, as every table's promotion writes the
        quarantine, whose bounds it makes again outside DuckLake's transactions (a promotion begun
        before would write the old ones back, the subject's value with them, at its commit)."""
        return [self.lake.table_of(spec) for spec in self.settings.tables]

    def scrubbed(self) -> list[Scrubbed]:
        """Every table scrubbed: the events tables, and the quarantine once (one table for all)."""
        rows = [t for _, t, _ in self.tables.values()]
        quarantine = [q for _, _, q in self.tables.values()]
        either = "(" + " OR ".join(q.subject for q in quarantine) + ")"
        return [*rows, Scrubbed(quarantine[0].schema, QUARANTINE, either, "NULL")]

    def _execute(self, query: str, extra: Mapping[str, object] | None = None) -> duckdb.DuckDBPyConnection:
        """``query`` with the parameters it names, of the erasure's (:attr:`params`) and ``extra``."""
        return self.lake.execute(query, subject_rows.bound(query, {**self.params, **(extra or {})}))

    def found(self) -> dict[str, TableErasure]:
        """The rows of the subject each table holds now, their ids' sums, and where they are."""
        report = {}
        inlined_prefix = self.lake.metadata()
        for name, (table, rows, quarantine) in self.tables.items():
            # one read of the rows' identities: their count and sums are taken from it (of_ids)
            identities = [r[0] for r in self._execute(
                f"SELECT {rows.identity} FROM {self.lake.name}.{rows.relation} "
                f"WHERE {rows.subject}").fetchall()]
            held = set(identities)
            current = [h for h in subject_rows.holdings(self.lake, rows, self.params) if h.end is None]
            inlined = sum(1 for h in current if h.where.startswith(inlined_prefix))
            set_aside = [r[0] for r in self._execute(
                f"SELECT {quarantine.identity} FROM {self.lake.name}.{quarantine.relation} "
                f"WHERE {quarantine.subject}").fetchall()]
            # not loaded yet: the source's rows neither in the table nor in the quarantine, nor
            # tombstoned by an earlier erasure (never loaded already: not this one's)
            waiting = (self.from_source.get(name, set()) - held - set(set_aside)
                       - tombstones.erased_identities(table))
            report[name] = TableErasure(str(self.keys[name]), len(identities), len(set_aside),
                                        of_ids(identities), len(current) - inlined, inlined, len(waiting))
        return report

    def held(self) -> list[Holding]:
        """Every file and inlined row, of every scrubbed table, holding the subject in any snapshot."""
        return [h for table in self.scrubbed() for h in subject_rows.holdings(self.lake, table, self.params)]

    def commit(self, commit: LakeCommit, receipt: dict[str, object], found: dict[str, TableErasure]) -> None:
        """Step 1: tombstones, receipt and DELETEs in one transaction (``commit``: the tables' locks)."""
        lake = self.lake
        summary = ", ".join(f"{name} {t.rows}" for name, t in found.items())
        with commit.transaction(f"erase a subject (receipt {self.erasure_id}): {summary} row(s)",
                                {"erasure_id": self.erasure_id}):
            for name, (_, rows, quarantine) in self.tables.items():
                for scrubbed in (rows, quarantine):
                    self._execute(f"INSERT INTO {lake.ops(tombstones.ERASED_IDS)} SELECT DISTINCT $erasure, "
                                 f"{quote_literal(name)}, {scrubbed.identity} "
                                 f"FROM {lake.name}.{scrubbed.relation} "
                                  f"WHERE {scrubbed.subject} AND {scrubbed.identity} IS NOT NULL")
            for name, identities in self.from_source.items():  # rows no load took yet: never will
                if identities:
                    lake.execute(f"INSERT INTO {lake.ops(tombstones.ERASED_IDS)} SELECT $erasure, $table, "
                                 "unnest($ids::UUID[])",
                                 {"erasure": self.erasure_id, "table": name, "ids": sorted(identities)})
            lake.execute(f"INSERT INTO {lake.ops(tombstones.ERASURES)} ({', '.join(receipt)}) VALUES "
                         f"({', '.join('?' for _ in receipt)})", list(receipt.values()))
            # the tombstones hold the ids now, so the erased ids match by identity too (a row whose
            # key the source changed since it was loaded is the subject's by its id)
            for _, rows, quarantine in self.tables.values():
                for scrubbed in (rows, quarantine):
                    self._execute(f"DELETE FROM {lake.name}.{scrubbed.relation} WHERE {scrubbed.subject}")

    def rewrite(self) -> tuple[int, int]:
        """Step 2: flush each scrubbed table's inlined rows and rewrite its files that lost rows.
        Returns (files written, bytes)."""
        lake, written, size = self.lake, 0, 0
        for table in self.scrubbed():
            self.step(f"rewriting {table.schema}.{table.name}'s files without the subject")
            before = {path for path, _, end, _ in subject_rows.data_files(lake, table) if end is None}
            # flushed before the moves (a few rows' deletes wait in the catalog until then) and after
            # (an UPDATE of a few rows keeps them inlined): the bounds below are made from files
            self._flush(table)
            self.keep_known_since(table)
            self._flush(table)
            with transaction(lake, f"erasure {self.erasure_id}: rewrite {table.name}'s files"):
                lake.execute("CALL ducklake_rewrite_data_files(?, ?, schema => ?, delete_threshold => 0)",
                             [lake.name, table.name, table.schema]).fetchall()
            column_stats.tighten(lake, table.schema, table.name)  # the subject's values out of its bounds
            new = [(path, file_size) for path, _, end, file_size in subject_rows.data_files(lake, table)
                   if end is None and path not in before]
            written, size = written + len(new), size + sum(s for _, s in new)
        return written, size

    def _flush(self, table: Scrubbed) -> None:
        lake = self.lake
        with transaction(lake, f"erasure {self.erasure_id}: flush {table.name}'s inlined rows"):
            lake.execute("CALL ducklake_flush_inlined_data(?, schema_name => ?, table_name => ?)",
                         [lake.name, table.schema, table.name]).fetchall()

    def keep_known_since(self, table: Scrubbed) -> None:
        """Rewrite the rows of ``table``'s files that lost rows with each row's first snapshot kept
        (:mod:`pipeline.lake.known_since`), before DuckLake's rewrite would give them its own: an
        UPDATE of every row of those files writes them once, keeping their row ids, and leaves the
        files wholly deleted, which the rewrite then drops without writing anything. In commits of
        at most :data:`MOVE_BYTES` of files each, as an UPDATE's memory grows with the rows it
        moves. A rerun after a kill finds the files moved already gone, and moves the rest."""
        lake = self.lake
        if table.schema != "main" or not known_since.has_column(
                events_column_types(lake.table_named(table.name))):
            return
        losing = lake.execute(
            "SELECT data_file, data_file_size_bytes FROM ducklake_list_files(?, ?, schema => ?) "
            "WHERE delete_file IS NOT NULL ORDER BY data_file",
            [lake.name, table.name, table.schema]).fetchall()
        groups: list[list[str]] = []
        size = 0
        for path, file_size in losing:
            if not groups or size + int(file_size or 0) > MOVE_BYTES:
                groups.append([])
                size = 0
            groups[-1].append(path)
            size += int(file_size or 0)
        for number, group in enumerate(groups, 1):
            with transaction(lake, f"erasure {self.erasure_id}: keep the first snapshots of the rows of "
                                   f"{table.name}'s {len(group)} file(s) it deleted from ({number} of "
                                   f"{len(groups)})"):
                lake.execute(f"UPDATE {quote_ident(lake.name)}.{table.relation} SET {known_since.kept_sql()} "
                             "WHERE filename IN (SELECT unnest(?::VARCHAR[]))", [group])

    def expire_and_delete(self) -> tuple[list[int], int]:
        """Step 3: expire the snapshots still listing the subject, delete the files none lists now.
        Returns (versions expired, snapshots kept)."""
        lake = self.lake
        held = self.held() + self.recorded()
        current = [h.where for h in held if h.end is None]
        if current:  # the rewrite left one: never report an erasure that did not happen
            raise RuntimeError(f"erasure {self.erasure_id}: {current[0]} still holds the subject after "
                               "the rewrite")
        expiring, kept = subject_rows.expiring(lake, held)
        if expiring:
            self.step(f"expiring {len(expiring)} snapshot(s) that list the subject's rows")
            lake.execute(f"CALL ducklake_expire_snapshots(?, versions => {expiring})", [lake.name]).fetchall()
        self.step("deleting the files no snapshot lists")
        lake.execute("CALL ducklake_cleanup_old_files(?, cleanup_all => true)", [lake.name]).fetchall()
        left = self.held()
        if left:
            raise RuntimeError(f"erasure {self.erasure_id}: {left[0].where} still holds the subject after "
                               "expiry")
        return expiring, kept

    def recorded(self) -> list[Holding]:
        """The files and inlined rows that held the subject when the erasure committed, as its receipt
        records them, where they are now: completing an interrupted erasure without the value, the
        tombstones' ids cannot find a row that was the subject's only in an older snapshot (its id
        now the row of another). Files gone since are left out; so are inlined rows then current
        (their ids are tombstoned, and found by them)."""
        row = self.lake.execute(f"SELECT holdings FROM {self.lake.ops(tombstones.ERASURES)} "
                                "WHERE erasure_id = ?", [self.erasure_id]).fetchone()
        if row is None or not row[0]:
            return []
        text = row[0]
        listed = {path: (begin, end) for table in self.scrubbed()
                  for path, begin, end, _ in subject_rows.data_files(self.lake, table)}
        found = []
        for entry in json.loads(text):
            where, end = str(entry["where"]), entry["end"]
            if where in listed:
                found.append(Holding(where, *listed[where]))
            elif where.startswith(self.lake.metadata()) and end is not None:
                found.append(Holding(where, int(entry["begin"]), int(end)))
        return found

    def scrub_staging(self) -> int:
        """Step 4: remove every staged batch (waiting or set aside) holding a row of the subject or
        of an erased id, and the lake files it would register. Returns how many."""
        removed = 0
        for spec in self.settings.tables:
            if spec.name not in self.tables:
                continue
            table_dir = staging.table_dir(self.settings, spec)
            failed = table_dir.child(staging.FAILED)
            for folder in [*table_dir.subdirs(staging.PREFIX), *failed.subdirs(staging.PREFIX)]:
                manifest = staging.read_manifest(folder)
                lake_files = [str(f["uri"]) for f in (manifest.lake_files or [])] if manifest else []
                files = [folder.uri(name) for name in folder.walk(".parquet")] + lake_files
                if files and self._staged_hold(spec.name, files):
                    self.step(f"removing staged batch {folder.name} (it holds the subject)")
                    for uri in lake_files:
                        self.lake.data_folder.delete_uri(uri)
                    staging.remove_batch(folder)
                    removed += 1
        return removed

    def scrub_orphans(self) -> int:
        """Step 4 too: delete the files the catalog never listed (a write a kill interrupted: a flush,
        an insert, a zero-copy extraction) that hold the subject. Only where no one else can be
        writing now: in the folders of the tables it erases from (their promotions and compaction wait
        for this erasure's locks; an extraction still running is left to its promotion, which keeps
        the erased ids out) a file that cannot be read is a torn write and goes too; in the
        quarantine's, which every table's promotion writes, only a file holding a quarantined row of
        the subject, by the quarantine's own test. Files staged batches will register are the staging
        step's. Returns how many were deleted."""
        lake, pending, running = self.lake, set(), set()
        # listed first, then which batches are staged or being extracted: an extraction claims its
        # batch before its first file and lets go only once it wrote its manifest, so every file
        # listed is known by then as a running or a staged batch's (read the other way round, a batch
        # that began and sealed in between lost a file; its promotion waits for this erasure's locks)
        orphans = own_orphans(lake, "now()")
        for spec in self.settings.tables:
            table_dir = staging.table_dir(self.settings, spec)
            running |= set(staging.running_batches(table_dir)) - set(staging.abandoned_batches(table_dir))
            pending |= staging.pending_lake_files(table_dir)
        folders = [table.table_folder.uri().rstrip("/") + "/" for table, _, _ in self.tables.values()]
        quarantine = self.scrubbed()[-1]
        quarantine_folder = lake.data_folder.child(lake.ops_schema).child(QUARANTINE).uri().rstrip("/") + "/"
        deleted = 0
        for uri in orphans:
            name = uri.rsplit("/", 1)[-1]
            if uri in pending or any(batch in uri for batch in running):
                continue
            if any(uri.startswith(folder) for folder in folders):
                try:
                    holds = self._orphan_holds(uri)
                except duckdb.Error:  # torn by the kill: nothing can tell what it holds
                    holds = True
            elif uri.startswith(quarantine_folder):
                try:
                    holds = bool(one_row(self._execute(f"SELECT count(*) FROM read_parquet($file) "
                                                       f"WHERE {quarantine.subject}", {"file": uri}))[0])
                except duckdb.Error:
                    holds = False  # another table's promotion may be writing it now
            else:
                continue
            if holds:
                self.step(f"deleting {name}, written by an interrupted write, holding the subject")
                lake.data_folder.delete_uri(uri)
                deleted += 1
        return deleted

    def _orphan_holds(self, uri: str) -> bool:
        """Does a file hold the value anywhere in a row, or an erased id (a UUID) of this erasure?"""
        return bool(one_row(self._execute(
            "WITH rows AS (SELECT concat_ws(chr(31), *COLUMNS(*)) AS text FROM read_parquet($file)) "
            "SELECT count(*) FROM rows WHERE contains(text, $value) OR EXISTS (SELECT 1 FROM "
            f"{self.lake.ops(tombstones.ERASED_IDS)} e WHERE e.erasure_id = $erasure AND "
            "contains(rows.text, CAST(e.identity AS VARCHAR)))",
            {"value": self.params["value"] or "\x00", "file": uri}))[0])

    def _staged_hold(self, table: str, files: list[str]) -> bool:
        """Does a staged file hold the value anywhere in a row, or an erased id of ``table``?"""
        kind = self.tables[table][0].id_kind()
        identity = duckdb_identity(duckdb_key("event_id", kind), kind)
        return bool(one_row(self._execute(
            "SELECT count(*) FROM read_parquet($files, union_by_name = true, hive_partitioning = false) "
            f"WHERE contains(concat_ws(chr(31), *COLUMNS(*)), $value) OR {identity} IN "
            f"(SELECT identity FROM {self.lake.ops(tombstones.ERASED_IDS)} WHERE erasure_id = $erasure)",
            {"value": self.params["value"] or "\x00", "files": files}))[0])


def run_erasure(lake: Lake, settings: ResolvedSettings, value: str, *, dry_run: bool,
                step: Callable[[str], None] = lambda _: None) -> ErasureReport:
    """Steps 1-4 of erasing ``value``'s rows from every table with a SUBJECT_KEY (``lake``: a writer's
    session; the caller holds the lake's expire and compact locks; this holds the tables' promote
    locks throughout), after completing any erasure a kill interrupted. The caller then vacuums the
    catalog (:mod:`pipeline.erase.catalog_vacuum`: with its own sessions closed, which would hold
    it back) and marks the receipts done (:func:`finish`). A value a receipt already names (the same
    keyed hash) of which nothing is left is not erased twice: the report names that receipt and nothing is
    written (one request, one receipt; a rerun of a killed erasure completes its receipt)."""
    started = time.monotonic()
    erasure = Erasure(lake, settings, uuid.uuid4().hex[:16], value, step)  # refused without SUBJECT_KEY
    report = ErasureReport(dry_run, erasure.erasure_id, tombstones.value_hash(value, _key(settings)),
                           "ERASURE_KEY")
    step("finding the subject's rows the source holds")
    erasure.read_source()
    if dry_run:
        step("finding the subject's rows")
        report.tables = erasure.found()
        held = erasure.held()
        report.snapshots_expired, report.snapshots_kept = subject_rows.expiring(lake, held)
        report.already_erased = _already_erased(lake, report, held)
        report.seconds = time.monotonic() - started
        return report
    with LakeCommit(erasure.locked) as commit:
        for pending in (r for r in tombstones.receipts(lake) if not r.done):
            step(f"completing erasure {pending.erasure_id}, which was interrupted")
            _complete(Erasure(lake, settings, pending.erasure_id, None, step), report)
            report.completed_before.append(pending.erasure_id)
        step("finding the subject's rows")
        report.tables = erasure.found()
        held = erasure.held()
        report.already_erased = _already_erased(lake, report, held)
        if report.already_erased is not None:
            report.seconds = time.monotonic() - started
            return report
        quarantined = {f"{name} (quarantined)": t.quarantined for name, t in report.tables.items()
                       if t.quarantined}
        receipt: dict[str, object] = {
            "erasure_id": report.erasure_id, "state": tombstones.ERASING,
            "requested_at": one_row(lake.execute("SELECT now()"))[0],
            "subject_keys": json.dumps({name: str(k) for name, k in erasure.keys.items()}),
            "value_hash": report.value_hash, "hash_key": report.hash_key,
            "rows_erased": json.dumps({name: t.rows for name, t in report.tables.items()} | quarantined),
            "ids_checksum": json.dumps({name: t.ids.as_dict() for name, t in report.tables.items()}),
            # where the subject is now, every snapshot included: what completes it without the value
            "holdings": json.dumps([{"where": h.where, "begin": h.begin, "end": h.end} for h in held])}
        report.snapshots_before = one_row(lake.execute(
            f"SELECT max(snapshot_id) FROM {lake.name}.snapshots()"))[0]
        step("committing the erasure (tombstones, receipt, deletes)")
        erasure.commit(commit, receipt, report.tables)
        _complete(erasure, report)
    report.seconds = time.monotonic() - started
    return report


def _key(settings: ResolvedSettings) -> str:
    """ERASURE_KEY, without which an erasure is refused: a key the lake held (its own id, once) is
    one any reader of the lake can use to test guesses against a receipt, and finds a value at once."""
    if settings.erasure_key is None:
        raise ConfigError(
            f"{actions.ERASE} needs ERASURE_KEY: a receipt holds a keyed hash of the value, and a key anyone "
            "who reads the lake could read would let them test guesses against it. Nothing was erased.",
            "Set ERASURE_KEY to a secret kept outside the lake (ERASURE_KEY_FILE: a file holding it), "
            "e.g. ERASURE_KEY=$(openssl rand -hex 32), and use the same one for every erasure of this "
            "lake (docs/erasure.md#the-receipt).")
    return settings.erasure_key.reveal()


def _already_erased(lake: Lake, report: ErasureReport, held: list[Holding]) -> str | None:
    """The receipt of an earlier erasure of the same value (its keyed hash) when nothing of the
    subject is left anywhere — no row, quarantined row, row in any retained snapshot, nor a row of
    the source no tombstone names yet: a second request then writes nothing. None otherwise."""
    left = any(t.rows or t.quarantined or t.not_loaded for t in report.tables.values()) or held
    if left:
        return None
    same = [r for r in tombstones.receipts(lake) if r.value_hash == report.value_hash]
    if not same:
        return None
    receipt = same[-1]
    # completed by this run, its snapshot is not recorded yet (finish())
    finishing = report.finishing.get(receipt.erasure_id, {}).get("snapshot_id")
    report.snapshot_id = receipt.snapshot_id if receipt.snapshot_id is not None else (
        int(str(finishing)) if finishing is not None else None)
    return receipt.erasure_id


def _complete(erasure: Erasure, report: ErasureReport) -> None:
    """Steps 2-4 of ``erasure`` (committed already): rewrite, expire, staging; what they did goes in
    ``report`` and, once the catalog is vacuumed, in the receipt (:func:`finish`)."""
    files, size = erasure.rewrite()
    expired, kept = erasure.expire_and_delete()
    # from this snapshot on (the rewrite's), every snapshot is free of the subject: the one the
    # erasure committed listed the old files, and was expired with them
    lake = erasure.lake
    clean = one_row(lake.execute(f"SELECT max(snapshot_id) FROM {lake.name}.snapshots()"))[0]
    removed = erasure.scrub_staging()
    report.orphans_deleted += erasure.scrub_orphans()
    report.finishing[erasure.erasure_id] = {
        "snapshot_id": clean, "snapshots_expired": json.dumps(expired), "files_rewritten": files,
        "bytes_written": size, "staged_batches_removed": removed}
    if erasure.erasure_id == report.erasure_id:
        report.snapshot_id, report.snapshots_expired, report.snapshots_kept = clean, expired, kept
        report.files_rewritten, report.bytes_written, report.staged_batches_removed = files, size, removed


def finish(lake: Lake, report: ErasureReport) -> None:
    """Step 6, once the catalog is vacuumed: each receipt the run completed says done, with what it
    cost (a kill before leaves them erasing: the next erasure completes them)."""
    for erasure_id, done in report.finishing.items():
        values = {**done, "catalog_vacuum": report.catalog_vacuum}
        sets = ", ".join(f"{name} = ?" for name in values)
        with transaction(lake, f"erasure {erasure_id}: done"):
            lake.execute(f"UPDATE {lake.ops(tombstones.ERASURES)} SET {sets}, state = ?, "
                         "completed_at = now() WHERE erasure_id = ?",
                         [*values.values(), tombstones.DONE, erasure_id])
