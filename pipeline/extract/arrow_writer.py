"""Write Arrow tables as staging Parquet files: the writer for every engine whose rows pass
through this process (dlt, and Spark with driver staging), so they all stage the same layout."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.columns import EVENT_COLUMNS

if TYPE_CHECKING:
    from pipeline.storage.folder import Folder

# The staging schema both Spark's own writer and this one produce: ids and JSON as text,
# timestamps as UTC instants in microseconds.
INSTANT = pa.timestamp("us", tz="UTC")
STAGING_SCHEMA = pa.schema([(name, INSTANT if name in ("event_timestamp", "created_at") else pa.string())
                            for name in EVENT_COLUMNS])
ROWS_PER_FILE = 1_000_000
# rows per row group, as DuckDB writes them: a filter skips a row group by its statistics, so a table
# written whole (a day's rows sorted by a typed payload key) is not one row group of a million rows
ROW_GROUP_ROWS = 122_880


def staging_schema(extra_columns: Iterable[str] = ()) -> pa.Schema:
    """The staging schema plus any columns the source added (as text)."""
    return pa.schema([*STAGING_SCHEMA, *(pa.field(name, pa.string()) for name in extra_columns)])


def to_staging_schema(item: pa.Table | pa.RecordBatch, schema: pa.Schema = STAGING_SCHEMA) -> pa.Table:
    table = item if isinstance(item, pa.Table) else pa.Table.from_batches([item])
    columns = [table.column(field.name).cast(field.type) for field in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def write_tables(folder: Folder, tables: Iterable[pa.Table | pa.RecordBatch],
                 extra_columns: Iterable[str] = (), on_rows: Callable[[int], None] = lambda _: None) -> int:
    """Write ``tables`` into a new ``folder`` (local or object storage) as ``part-NNNNN.parquet``
    files of at most about :data:`ROWS_PER_FILE` rows; returns the rows written (and tells
    ``on_rows`` the running total after each table). Memory holds one
    table at a time (plus, on object storage, the part of a file not yet uploaded)."""
    folder.make(exist_ok=False)
    schema = staging_schema(extra_columns)
    part, rows_in_file, total = 0, 0, 0
    file: ParquetFile | None = None
    try:
        for item in tables:
            table = to_staging_schema(item, schema)
            if file is None or rows_in_file >= ROWS_PER_FILE:
                if file is not None:
                    file.close()
                file = ParquetFile(folder, f"part-{part:05d}.parquet", schema)
                part, rows_in_file = part + 1, 0
            file.write(table)
            rows_in_file += table.num_rows
            total += table.num_rows
            on_rows(total)
    except BaseException:
        if file is not None:
            file.abort()
        raise
    if file is not None:
        file.close()
    return total


class ParquetFile:
    """One Parquet file being written (its folder made first on a local filesystem).

    Closing it writes the footer, then the file appears under its name all at once: a local file
    is written under a hidden partial name and renamed (the data-file listings skip hidden
    names), an object-store upload completes on close (until then the object does not exist).
    So a task that dies, or a retried or speculative one, never leaves a half file under a name
    a manifest or the lake could take; :meth:`abort` drops the partial file instead."""

    def __init__(self, folder: Folder, name: str, schema: pa.Schema) -> None:
        folder.make(exist_ok=True)
        self.folder, self.name = folder, name
        self.partial = f".{name}.{secrets.token_hex(4)}.partial" if folder.is_local else name
        self.sink = folder.open_output(self.partial)
        # dictionaries only where values repeat: ids and JSON are (nearly) unique, so trying
        # costs ~20% of the write for nothing
        repeating = [column for column in ("event_type",) if column in schema.names]
        self.writer = pq.ParquetWriter(self.sink, schema, compression="snappy", use_dictionary=repeating)
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        self.writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self.rows += table.num_rows

    def close(self) -> None:
        try:
            self.writer.close()
        finally:
            self.sink.close()
        if self.partial != self.name:
            self.folder.transfer(self.partial, self.folder, self.name)  # a rename, in one folder

    def abort(self) -> None:
        """Give up the file: nothing appears under its name (a partial local file is deleted)."""
        with contextlib.suppress(Exception):  # the error that made us abort is the one to report
            self.writer.close()
            self.sink.close()
        self.folder.delete(self.partial)

    def __enter__(self) -> ParquetFile:
        return self

    def __exit__(self, failed: type[BaseException] | None, *_: object) -> None:
        if failed is None:
            self.close()
        else:
            self.abort()
