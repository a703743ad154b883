"""One commit of the lake, for every writer of its tables: a load's batch, a group of tables' batches
(one image), a reconcile's backfill and a repair all commit through :class:`LakeCommit`.

It holds each written table's ``promote`` lock, taken in table order (two writers of overlapping
tables never deadlock, whatever order their settings list the tables in); runs the body in one
DuckLake transaction with its commit message and extra info; checks every lease just before COMMIT
(fencing: a writer whose lock connection died may have been overtaken, so it commits nothing); and
finds the snapshot it made by the commit id it wrote in the extra info, never by ``max(snapshot_id)``
(another writer of another table may have committed since). A disk full is named, and the failed
insert's half-written files are removed at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from types import TracebackType

import duckdb

from pipeline.errors import disk_full, is_disk_full
from pipeline.lake import locks
from pipeline.lake.session import LakeTable
from pipeline.lake.transaction import Transaction, transaction
from pipeline.sqltext import one_row

log = logging.getLogger(__name__)
COMMIT_ID = "commit_id"  # the key of the extra info that names a commit (its snapshot is found by it)


class LakeCommit:
    """The promote locks of ``tables`` (the same session's views of the lake's tables), held from
    ``with`` to its end; :meth:`transaction` is the one commit made under them."""

    def __init__(self, tables: Sequence[LakeTable]) -> None:
        if not tables:
            raise ValueError("a commit writes at least one table")
        self.lake = tables[0].lake  # the one session the commit is made in
        if any(table.lake.con is not self.lake.con for table in tables):
            raise ValueError("a commit's tables are views of one lake session")
        self.tables = sorted(tables, key=lambda table: table.name)
        self.leases: list[locks.Lease] = []
        self.snapshot_id: int | None = None  # the snapshot the commit made (None: none, or not yet)
        self._held = contextlib.ExitStack()

    def __enter__(self) -> LakeCommit:
        with contextlib.ExitStack() as taking:
            self.leases = [taking.enter_context(lake.lock("promote")) for lake in self.tables]
            self._held = taking.pop_all()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._held.close()

    @contextlib.contextmanager
    def transaction(self, message: str, extra_info: dict[str, object]) -> Iterator[Transaction]:
        """BEGIN with ``message`` and ``extra_info`` (plus the commit id), the body, the fencing
        check, COMMIT; a body that calls ``rollback()`` (nothing changed) commits nothing and makes
        no snapshot. :attr:`snapshot_id` is set after a commit."""
        commit_id = uuid.uuid4().hex
        began = time.time()
        try:
            with transaction(self.lake, message, json.dumps({**extra_info, COMMIT_ID: commit_id})) as tx:
                yield tx
                if not tx.finished:
                    for lease in self.leases:
                        lease.check()  # fencing: commit only while still holding every lock
        except duckdb.Error as exc:
            if not is_disk_full(exc):
                raise
            for lake in self.tables:
                with contextlib.suppress(Exception):
                    remove_partial_files(lake, began)
            raise disk_full(exc, self.lake.data_path, "DUCKLAKE_DATA_PATH") from None
        if not tx.finished:
            self.snapshot_id = one_row(self.lake.execute(
                f"SELECT max(snapshot_id) FROM {self.lake.name}.snapshots() "
                f"WHERE json_extract_string(commit_extra_info, '$.{COMMIT_ID}') = ?", [commit_id]))[0]


def remove_partial_files(table: LakeTable, since: float) -> None:
    """DuckLake's own files in the table folder written since ``since`` that its catalog does not
    list: the failed insert's (a disk full for this commit is full for every writer, so no other
    insert can be completing one of them)."""
    folder = table.table_folder
    listed = {r[0] for r in table.lake.execute("SELECT data_file FROM ducklake_list_files(?, ?)",
                                               [table.lake.name, table.name]).fetchall()}
    for info in folder.files_below():
        uri = f"{folder.scheme}://{info.path}" if folder.scheme else info.path
        if (info.base_name.startswith("ducklake-")
                and info.mtime is not None and info.mtime.timestamp() >= since - 1 and uri not in listed):
            log.info("removing %s, left by the failed insert", uri)
            folder.fs.delete_file(info.path)
