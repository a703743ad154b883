"""Open a DuckDB session with the lake attached, and create the lake tables on first use."""

from __future__ import annotations

import duckdb

from pipeline import extensions
from pipeline.attach import StorageOptions, extension_names, open_statements
from pipeline.config import Settings
from pipeline.errors import CatalogUnavailable, ConfigError
from pipeline.pgdsn import scrub_secrets
from pipeline.sqlfiles import read_sql, split_statements

PARTITION_BY = "year(event_timestamp), month(event_timestamp), day(event_timestamp)"


def connect(settings: Settings, *, read_only: bool = False, snapshot_version: int | None = None,
            snapshot_time: str | None = None) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB session with the lake attached under ``settings.lake_name``."""
    if settings.catalog is None or settings.data_path is None:
        raise ConfigError("The lake location is not resolved.",
                          "Call pipeline.services.resolve(settings) first.")
    con = duckdb.connect()
    extensions.load(con, *extension_names(settings.catalog, settings.data_path))
    statements = open_statements(
        settings.lake_name, settings.catalog, settings.data_path,
        storage=StorageOptions.from_env(), show_secrets=True, read_only=read_only,
        snapshot_version=snapshot_version, snapshot_time=snapshot_time,
    )
    for statement in statements:
        if statement.startswith("LOAD "):
            continue  # done above, from the wheels
        try:
            con.execute(statement)
        except duckdb.Error as exc:
            con.close()
            if statement.startswith("ATTACH"):
                raise CatalogUnavailable(
                    f"Cannot open the lake catalog ({settings.catalog.describe()}): "
                    f"{scrub_secrets(str(exc)).strip()}",
                    "Check DUCKLAKE_CATALOG and that the catalog database is reachable.",
                ) from None
            raise
    return con


def ensure_tables(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """Create schemas, the events table (partitioned by event day) and the state table."""
    lake, table = settings.lake_name, settings.lake_table
    exists = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' "
        "AND table_name = ?", [lake, table]).fetchone()[0]
    ops_exists = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND schema_name = ? "
        "AND table_name = 'batches'", [lake, settings.ops_schema]).fetchone()[0]
    if exists and ops_exists:
        return
    con.execute("BEGIN")
    try:
        con.execute(f"CALL {lake}.set_commit_message('event-lake', 'create lake tables')")
        for statement in split_statements(read_sql("lake_events.sql")):
            con.execute(statement.format(lake=lake, table=table, ops=settings.ops_schema))
        if not exists:
            con.execute(f"ALTER TABLE {settings.events_table} SET PARTITIONED BY ({PARTITION_BY})")
        con.execute("COMMIT")
    except duckdb.Error:
        con.execute("ROLLBACK")
        raise
