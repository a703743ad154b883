"""Lake maintenance: expire old snapshots, then compact (flush inlined rows, merge small
files, delete files nobody references any more). Each step reports what it did.

Time travel keeps working for every snapshot inside the retention: merged-away files stay
referenced by those snapshots and are only deleted once the snapshots themselves expire.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from enum import StrEnum

import duckdb

from pipeline import staging
from pipeline.lake import ownership
from pipeline.lake.connect import lake_session
from pipeline.lake.session import Lake
from pipeline.lake.transaction import transaction
from pipeline.progress import Progress
from pipeline.settings import ResolvedSettings
from pipeline.settings.durations import format_duration
from pipeline.sqltext import one_row
from pipeline.storage.folder import Folder, split_uri

log = logging.getLogger(__name__)

# Files that exist in the data path but not in the catalog may belong to a promotion that
# is about to commit; only files older than this are treated as orphans.
ORPHAN_GRACE = timedelta(hours=1)
# Files DuckLake scheduled for deletion (merged away, or only referenced by expired snapshots)
# may still be read by a transaction that began before; they are deleted only once they have
# been scheduled this long. (Deleting them at once broke a load running beside compaction:
# "Cannot open file …/ops/batches/ducklake-….parquet".)
DELETE_GRACE = timedelta(minutes=15)


@dataclass
class MaintenanceReport:
    dry_run: bool
    retention: str
    snapshots_expired: list[int] = field(default_factory=list)
    inlined_rows_flushed: int | None = None
    files_before: int = 0
    files_after: int = 0
    files_deleted: int = 0
    bytes_deleted: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def describe(self) -> str:
        would = "would be " if self.dry_run else ""
        merged = (f"{self.files_before} data files, about {self.files_after} after merging"
                  if self.dry_run else f"data files {self.files_before} -> {self.files_after}")
        return (f"{'dry run: ' if self.dry_run else ''}{len(self.snapshots_expired)} snapshot(s) "
                f"{would}expired (older than {self.retention}); {merged}; "
                f"{self.files_deleted} file(s), {self.bytes_deleted:,} bytes {would}deleted; "
                f"{self.seconds:.1f}s")


def data_file_count(lake: Lake) -> int:
    return one_row(lake.execute(
        "SELECT coalesce(sum(file_count), 0) FROM ducklake_table_info(?)", [lake.name]
    ))[0]


SMALL_FILE_BYTES = 16 * 2**20  # a file smaller than this is one merging would fold into its neighbours


def unmerged_files(lake: Lake, tables: Iterable[str]) -> int:
    """Small data files beyond one per partition folder, over ``tables``: about what merging folds
    away (a group-by over 10k unmerged files ran 26x slower than over the same rows merged)."""
    return sum(one_row(lake.execute(
        "SELECT count(*) - count(DISTINCT regexp_replace(data_file, '/[^/]*$', '')) "
        "FROM ducklake_list_files(?, ?) WHERE data_file_size_bytes < ?",
        [lake.name, table, SMALL_FILE_BYTES]))[0] for table in tables)


def compaction_due(files_to_merge: int, limit: int) -> bool:
    """Have ``limit`` (COMPACT_FILES) small files piled up (0: never by count)? Said in the log
    when they have."""
    if not limit or files_to_merge < limit:
        return False
    log.info("%d small data files wait to be merged (COMPACT_FILES %d): compacting now",
             files_to_merge, limit)
    return True


def _older_than(retention: timedelta) -> str:
    """The cut-off ``retention`` before the transaction's start, to the microsecond (whole seconds
    moved it up to 1 s later than the retention said)."""
    return f"now() - to_microseconds({retention // timedelta(microseconds=1)})"


def _size(folder: Folder, uri: str) -> int:
    """Bytes of a file below ``folder``, on whichever filesystem holds it (0 once gone)."""
    import pyarrow.fs as pafs

    info = folder.fs.get_file_info(split_uri(uri)[1] if folder.scheme else uri)
    return info.size if info.type == pafs.FileType.File and info.size is not None else 0


def expire(lake: Lake, retention: timedelta,
           dry_run: bool, report: MaintenanceReport) -> None:
    """Expire snapshots older than ``retention`` (the latest snapshot is never expired)."""
    rows = lake.execute(
        f"CALL ducklake_expire_snapshots(?, dry_run => ?, older_than => {_older_than(retention)})",
        [lake.name, dry_run]).fetchall()
    report.snapshots_expired = sorted(r[0] for r in rows)


def _planned_merge(lake: Lake) -> int:
    """Files after merging, estimated as one file per partition folder of every table (for --dry-run)."""
    tables = [name for (name,) in lake.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main'",
        [lake.name]).fetchall()]
    files = [r[0] for table in tables for r in lake.execute(
        "SELECT data_file FROM ducklake_list_files(?, ?)", [lake.name, table]).fetchall()]
    folders = Counter(path.rsplit("/", 1)[0] for path in files)
    return len(folders)


def compact(lake: Lake, staged: Iterable[Folder], dry_run: bool, report: MaintenanceReport,
            delete_grace: timedelta = DELETE_GRACE, step: Callable[[str], None] = lambda _: None) -> None:
    """Flush inlined rows, merge adjacent small files, delete unreferenced and orphaned files
    (never a file a batch staged in one of the tables' ``staged`` folders will register).

    Needs no retention of its own: only files of already-expired snapshots are unreferenced."""
    if dry_run:
        report.files_before = data_file_count(lake)
        report.files_after = _planned_merge(lake)
    else:
        step("flushing inlined rows")
        # each in a transaction of its own with a commit message: --snapshots showed compaction's
        # snapshots without author or message
        with transaction(lake, "maintenance: flush inlined rows to files"):
            flushed = lake.execute("CALL ducklake_flush_inlined_data(?)", [lake.name]).fetchall()
        report.inlined_rows_flushed = int(sum(r[2] for r in flushed))
        report.files_before = data_file_count(lake)  # after the flush: what merging sees
        step(f"merging {report.files_before} data files")
        with lake.all_cores(), transaction(lake, "maintenance: merge adjacent data files"):
            lake.execute("CALL ducklake_merge_adjacent_files(?)", [lake.name]).fetchall()
        report.files_after = data_file_count(lake)
    # zero-copy files a staged batch will register are not in the catalog yet, but not orphans
    pending = {uri for folder in staged for uri in staging.pending_lake_files(folder)}
    folder = lake.data_folder
    step("finding unreferenced files")
    unreferenced = _planned(lake, "ducklake_cleanup_old_files", _older_than(delete_grace))
    kept = [p for p in unreferenced if p in pending]
    unreferenced = [p for p in unreferenced if p not in pending]
    sizes = sum(_size(folder, p) for p in unreferenced)  # before they are gone (it reported 0 bytes)
    if not dry_run and unreferenced:
        if kept:  # DuckLake deletes all it found: delete only the truly unreferenced, one by one
            _delete_files(folder, unreferenced)
        else:  # DuckLake also forgets them in its catalog
            lake.execute(f"CALL ducklake_cleanup_old_files(?, dry_run => false, "
                        f"older_than => {_older_than(delete_grace)})", [lake.name]).fetchall()
    step("finding orphaned files")
    # DuckLake lists every Parquet file under the data path that its catalog does not know,
    # other lakes' files included: only this lake's own table folders are ever cleaned
    orphans = [p for p in own_orphans(lake, _older_than(ORPHAN_GRACE)) if p not in pending]
    sizes += sum(_size(folder, p) for p in orphans)
    if not dry_run:
        _delete_files(folder, orphans)
    deleted = unreferenced + orphans
    report.bytes_deleted += sizes
    report.files_deleted = len(deleted)


def own_orphans(lake: Lake, older_than: str) -> list[str]:
    """Files below this lake's own table folders that its catalog never listed, named as the lake
    writes them, last written before ``older_than`` (SQL). DuckLake lists every Parquet file under
    the data path that its catalog does not know, other lakes' files included: only this lake's own
    are ever returned."""
    return ownership.deletable_orphans(_planned(lake, "ducklake_delete_orphaned_files", older_than),
                                       ownership.own_table_folders(lake),
                                       ownership.foreign_markers(lake.data_folder))


# Listing the data folder races with writers: a slice task's temporary file can be renamed between
# DuckLake finding it and opening it ("Cannot open file … No such file or directory", seen while
# loads ran beside compaction). A file that vanished is no orphan: the listing is taken again.
LISTING_ATTEMPTS = 5


def _planned(lake: Lake, function: str, older_than: str) -> list[str]:
    call = f"CALL {function}(?, dry_run => true, older_than => {older_than})"
    for attempt in range(1, LISTING_ATTEMPTS):
        try:
            return [r[0] for r in lake.execute(call, [lake.name]).fetchall()]
        except duckdb.IOException as exc:
            if "No such file or directory" not in str(exc):
                raise
            time.sleep(0.1 * attempt)
    return [r[0] for r in lake.execute(call, [lake.name]).fetchall()]  # the last try's error is ours


def _delete_files(folder: Folder, uris: list[str]) -> None:
    for uri in uris:
        folder.delete_uri(uri)


class Step(StrEnum):
    """One maintenance job (the scheduler runs each on its own interval; ``--maintain`` both)."""

    EXPIRE = "expire"  # forget snapshots older than the retention
    COMPACT = "compact"  # flush inlined rows, merge small files, delete what no snapshot needs


BOTH = (Step.EXPIRE, Step.COMPACT)


def run_maintenance(settings: ResolvedSettings, retention: timedelta, *, dry_run: bool = False,
                    steps: tuple[Step, ...] = BOTH,
                    delete_grace: timedelta = DELETE_GRACE) -> MaintenanceReport:
    """Run the given steps; one report for all of them.
    ``delete_grace``: how long a file must have been scheduled for deletion before it goes."""
    started = time.monotonic()
    report = MaintenanceReport(dry_run=dry_run, retention=format_duration(retention))
    meter = Progress("maintenance" + (" (dry run)" if dry_run else ""))
    with lake_session(settings, tables=True) as lake, meter.ticking():
        if Step.EXPIRE in steps:
            meter.step(f"expiring snapshots older than {format_duration(retention)}")
            expire(lake, retention, dry_run, report)
        if Step.COMPACT in steps:
            staged = [staging.table_dir(settings, table) for table in settings.tables]
            compact(lake, staged, dry_run, report, delete_grace, meter.step)
        else:
            report.files_before = report.files_after = data_file_count(lake)
    report.seconds = time.monotonic() - started
    meter.finish(note=f"data files {report.files_before} -> {report.files_after}")
    return report
