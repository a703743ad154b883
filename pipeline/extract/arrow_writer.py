"""Write Arrow tables as staging Parquet files: the writer for every engine whose rows pass
through this process (dlt, and Spark with driver staging), so they all stage the same layout."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# The staging schema both Spark's own writer and this one produce: ids and JSON as text,
# timestamps as UTC instants in microseconds.
STAGING_SCHEMA = pa.schema([
    ("event_id", pa.string()),
    ("event_type", pa.string()),
    ("event_timestamp", pa.timestamp("us", tz="UTC")),
    ("details", pa.string()),
    ("created_at", pa.timestamp("us", tz="UTC")),
])
ROWS_PER_FILE = 1_000_000


def to_staging_schema(item: pa.Table | pa.RecordBatch) -> pa.Table:
    table = item if isinstance(item, pa.Table) else pa.Table.from_batches([item])
    columns = [table.column(field.name).cast(field.type) for field in STAGING_SCHEMA]
    return pa.Table.from_arrays(columns, schema=STAGING_SCHEMA)


def write_tables(path: Path, tables: Iterable[pa.Table | pa.RecordBatch]) -> int:
    """Write ``tables`` into a new folder ``path`` as ``part-NNNNN.parquet`` files of at most
    about :data:`ROWS_PER_FILE` rows; returns the rows written. Memory holds one table at a time."""
    path.mkdir(parents=True, exist_ok=False)
    writer: pq.ParquetWriter | None = None
    part, rows_in_file, total = 0, 0, 0
    try:
        for item in tables:
            table = to_staging_schema(item)
            if writer is None or rows_in_file >= ROWS_PER_FILE:
                if writer is not None:
                    writer.close()
                writer = pq.ParquetWriter(path / f"part-{part:05d}.parquet", STAGING_SCHEMA,
                                          compression="snappy")
                part, rows_in_file = part + 1, 0
            writer.write_table(table)
            rows_in_file += table.num_rows
            total += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    return total
