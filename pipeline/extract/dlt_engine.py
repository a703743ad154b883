"""``--engine dlt``: the same extraction with dlt's ``sql_database`` source (pyarrow backend).

dlt reads the window as Arrow tables; we cast them to the staging schema and write the
same layout the Spark engine writes, so promotion cannot tell the engines apart.
"""

from __future__ import annotations

from pipeline.extract.arrow_writer import write_tables
from pipeline.extract.batch import ExtractRequest, select_sql
from pipeline.id_checksum import IdSum
from pipeline.progress import Progress
from pipeline.settings.model import Engine
from pipeline.source.give_way import reader_tag
from pipeline.source.snapshot import import_statements

CHUNK_ROWS = 100_000


class DltExtractor:
    engine = Engine.DLT

    def write_parquet(self, request: ExtractRequest, meter: Progress) -> IdSum | None:
        """Write the window's rows; the ids are not summed here (None: the plan's snapshot sums them)."""
        import sqlalchemy as sa
        from dlt.sources.sql_database import sql_table

        settings = request.settings
        query = sa.text(select_sql(request.plan.source.sql, request.window, request.extra_columns))
        # the planner's time zone, as every reader's (naive columns are wall-clock time there)
        # tagged as the Spark readers are: a snapshot that gives way ends them (pipeline.source.give_way)
        engine = sa.create_engine(settings.source_dsn.sqlalchemy_url(),
                                  connect_args={"options": f"-c TimeZone={request.timezone}",
                                                "application_name": reader_tag(request.snapshot_id or "",
                                                                               request.batch_id)})
        if request.snapshot_id:
            _read_in_snapshot(engine, request.snapshot_id)
        resource = sql_table(
            credentials=engine,
            table=request.table.name,
            schema=request.table.schema,
            backend="pyarrow",
            chunk_size=CHUNK_ROWS,
            reflection_level="minimal",
            query_adapter_callback=lambda _query, _table: query,
            # every column may read NULL: the time of a row without one (±infinity, past the horizon)
            # is read as NULL, and a batch of such rows alone failed ("A null type field may not be
            # non-nullable": the table's NOT NULL became the Arrow field's)
            table_adapter_callback=_nullable,
        )
        try:
            write_tables(request.folder, resource, request.extra_columns, on_rows=meter.update)
        finally:
            engine.dispose()
        return None


def _nullable(table):
    """The reflected table with every column nullable (what a read of it may give)."""
    for column in table.columns:
        column.nullable = True
    return table


def _read_in_snapshot(engine, snapshot_id: str) -> None:
    """Every connection dlt checks out starts its transaction in the planner's snapshot."""
    from sqlalchemy import event

    def on_checkout(dbapi_connection, _record, _proxy) -> None:
        for statement in import_statements(snapshot_id):
            dbapi_connection.execute(statement)

    event.listen(engine, "checkout", on_checkout)
