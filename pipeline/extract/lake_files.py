"""Zero-copy extraction's last step: Spark's output becomes the lake's files plus a staged rest.

Spark writes a zero-copy batch once, into ``<table folder>/_incoming/<batch id>/``, split by
``_dest``: ``_dest=lake/year=Y/month=M/day=D/`` holds rows the lake will take as they are,
``_dest=stage/…`` the rows copy promotion must look at (see :mod:`pipeline.promote.zero_copy`).
Settling renames the lake files into the table's own day folders under batch-unique names (one
rename per file: nothing is rewritten) and the rest into the batch's staging folder. Until the
batch's manifest lists them, the lake files are orphans that maintenance removes.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pipeline.promote.zero_copy import LakeTarget
from pipeline.source.window import iso
from pipeline.staging import LakeFile
from pipeline.storage.folder import Folder

if TYPE_CHECKING:  # pyarrow (and the pandas it brings) only once a batch's files are settled:
    # --status, --verify and a run with nothing new load this module and never read a file
    import pyarrow as pa


def incoming_dir(target: LakeTarget, batch_id: str) -> Folder:
    return target.incoming.child(batch_id)


@dataclass
class Settled:
    lake_files: list[LakeFile] = field(default_factory=list)  # uri, rows, event time range
    schema: pa.Schema | None = None  # of the lake files
    rows_seen: int = 0  # rows whose id the lake already held (their files are deleted)


def settle(target: LakeTarget, batch_id: str, batch_folder: Folder) -> Settled:
    """Move Spark's output into place: lake files into the day folders, the rest to stage into
    the batch folder; rows the lake already holds are counted and their files deleted."""
    import pyarrow.parquet as pq

    from pipeline.extract.slice_task import DEST, SEEN  # one spelling for both readers

    incoming = incoming_dir(target, batch_id)
    batch_folder.make(exist_ok=True)
    settled = Settled()
    for number, relative in enumerate(incoming.walk(".parquet")):
        dest, *hive, _ = relative.split("/")
        if dest == f"{DEST}={SEEN}":
            with incoming.open_input(relative) as handle:
                settled.rows_seen += pq.read_metadata(handle).num_rows
            continue
        if dest == f"{DEST}=stage":
            incoming.transfer(relative, batch_folder, f"stage-{number:05d}.parquet")
            continue
        folder = target.table_folder.child(posixpath.join(*hive))
        name = f"{batch_id}-{number:05d}.parquet"
        incoming.transfer(relative, folder, name)
        entry, settled.schema = _describe(folder, name)
        settled.lake_files.append(entry)
    incoming.remove()
    target.remove_ids()
    return settled


def _describe(folder: Folder, name: str) -> tuple[LakeFile, pa.Schema]:
    """Rows and event time range from the file's footer (no data pages are read), and its schema."""
    import pyarrow.parquet as pq

    with folder.open_input(name) as handle:
        metadata = pq.read_metadata(handle)
    schema = metadata.schema.to_arrow_schema()
    column = schema.get_field_index("event_timestamp")
    lows, highs = [], []
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(column).statistics
        if stats is not None and stats.has_min_max:
            lows.append(_utc(stats.min))
            highs.append(_utc(stats.max))
    if len(lows) != metadata.num_row_groups:  # a writer without statistics: read the one column
        with folder.open_input(name) as handle:
            values = pq.read_table(handle, columns=["event_timestamp"]).column(0)
        lows, highs = [_utc(min(values).as_py())], [_utc(max(values).as_py())]
    return {"uri": folder.uri(name), "rows": metadata.num_rows,
            "min_event_timestamp": iso(min(lows)), "max_event_timestamp": iso(max(highs))}, schema


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value
