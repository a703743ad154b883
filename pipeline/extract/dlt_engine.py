"""``--engine dlt``: the same extraction with dlt's ``sql_database`` source (pyarrow backend).

dlt reads the window as Arrow tables; we cast them to the staging schema and write the
same layout the Spark engine writes, so promotion cannot tell the engines apart.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.extract.batch import ExtractRequest, select_sql
from pipeline.source.snapshot import import_statements

STAGING_SCHEMA = pa.schema([
    ("event_id", pa.string()),
    ("event_type", pa.string()),
    ("event_timestamp", pa.timestamp("us", tz="UTC")),
    ("details", pa.string()),
    ("created_at", pa.timestamp("us", tz="UTC")),
])
CHUNK_ROWS = 100_000
ROWS_PER_FILE = 1_000_000


class DltExtractor:
    engine = "dlt"

    def write_parquet(self, request: ExtractRequest) -> None:
        import sqlalchemy as sa
        from dlt.sources.sql_database import sql_table

        settings = request.settings
        query = sa.text(select_sql(settings.source_table, request.window))
        engine = sa.create_engine(settings.source_dsn.sqlalchemy_url(),
                                  connect_args={"options": "-c TimeZone=UTC"})
        if request.snapshot_id:
            _read_in_snapshot(engine, request.snapshot_id)
        resource = sql_table(
            credentials=engine,
            table=settings.source_table_name,
            schema=settings.source_schema_name,
            backend="pyarrow",
            chunk_size=CHUNK_ROWS,
            reflection_level="minimal",
            query_adapter_callback=lambda _query, _table: query,
        )
        request.path.mkdir(parents=True, exist_ok=False)
        writer: pq.ParquetWriter | None = None
        part, rows_in_file = 0, 0
        try:
            for item in resource:
                table = _to_staging_schema(item)
                if writer is None or rows_in_file >= ROWS_PER_FILE:
                    if writer is not None:
                        writer.close()
                    writer = pq.ParquetWriter(request.path / f"part-{part:05d}.parquet",
                                              STAGING_SCHEMA, compression="snappy")
                    part, rows_in_file = part + 1, 0
                writer.write_table(table)
                rows_in_file += table.num_rows
        finally:
            if writer is not None:
                writer.close()
            engine.dispose()


def _read_in_snapshot(engine, snapshot_id: str) -> None:
    """Every connection dlt checks out starts its transaction in the planner's snapshot."""
    from sqlalchemy import event

    def on_checkout(dbapi_connection, _record, _proxy) -> None:
        for statement in import_statements(snapshot_id):
            dbapi_connection.execute(statement)

    event.listen(engine, "checkout", on_checkout)


def _to_staging_schema(item: pa.Table | pa.RecordBatch) -> pa.Table:
    table = item if isinstance(item, pa.Table) else pa.Table.from_batches([item])
    columns = [table.column(field.name).cast(field.type) for field in STAGING_SCHEMA]
    return pa.Table.from_arrays(columns, schema=STAGING_SCHEMA)
