"""What every extraction engine shares: the source query, the request, and how a batch ends.

Engines (:mod:`.spark_engine`, :mod:`.dlt_engine`) only differ in how they move rows from
Postgres into Parquet files inside the batch folder; the query, the column types and the
manifest are the same, so both engines produce identical lakes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow.parquet as pq

from pipeline import staging
from pipeline.settings import ResolvedSettings
from pipeline.source.stats import WindowStats
from pipeline.source.window import Window, iso
from pipeline.sqltext import quote_qualified
from pipeline.staging import Manifest, StagedBatch

# Staged column -> Postgres expression. event_id in its canonical text form, details as the
# jsonb's own text; timestamps stay instants (Parquet TIMESTAMP(isAdjustedToUTC=true, MICROS)).
STAGED_COLUMNS = {
    "event_id": "event_id::text",
    "event_type": "event_type",
    "event_timestamp": "event_timestamp",
    "details": "details::text",
    "created_at": "created_at",
}


def select_sql(qualified_table: str, window: Window) -> str:
    """The one SELECT both engines run (with literal bounds: JDBC subqueries take no params)."""
    columns = ", ".join(f"{expr} AS {name}" for name, expr in STAGED_COLUMNS.items())
    return f"SELECT {columns} FROM {quote_qualified(qualified_table)} WHERE {window.literal_sql()}"


@dataclass(frozen=True)
class ExtractRequest:
    """One extraction: the window, what the source said it holds, and where to write."""

    settings: ResolvedSettings
    window: Window
    stats: WindowStats
    batch_id: str

    @property
    def path(self) -> Path:
        return staging.batch_dir(self.settings.staging_table_dir, self.batch_id)


class Extractor(Protocol):
    engine: str

    def write_parquet(self, request: ExtractRequest) -> None:
        """Write the window's rows as Parquet files into ``request.path``."""


def extract(extractor: Extractor, request: ExtractRequest) -> StagedBatch:
    """Run ``extractor`` into a new batch folder, then write the manifest (last)."""
    started = time.monotonic()
    request.path.parent.mkdir(parents=True, exist_ok=True)
    extractor.write_parquet(request)
    files = staging.parquet_files(request.path)
    rows = sum(pq.read_metadata(request.path / name).num_rows for name in files)
    schema = pq.read_schema(request.path / files[0]) if files else None
    manifest = Manifest(
        batch_id=request.batch_id,
        table=request.settings.lake_table,
        engine=extractor.engine,
        window_low=iso(request.window.low) if request.window.low else None,
        window_upper=iso(request.window.upper),
        row_count=rows,
        files=files,
        schema=[{"name": f.name, "type": str(f.type)} for f in schema] if schema else [],
        extract_seconds=round(time.monotonic() - started, 3),
    )
    staging.write_manifest(request.path, manifest)
    return StagedBatch(path=request.path, manifest=manifest)
