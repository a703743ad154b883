"""Open a DuckDB session with the lake attached, and create the lake tables on first use."""

from __future__ import annotations

import contextlib

import duckdb

from pipeline import extensions, locks
from pipeline.attach import StorageOptions, extension_names, open_statements
from pipeline.catalog import ACCEPTED_FORMS
from pipeline.config import Settings
from pipeline.errors import (
    CatalogUnavailable,
    ConfigError,
    PipelineError,
    TerminalError,
    looks_transient,
)
from pipeline.pgdsn import scrub_secrets
from pipeline.sqlfiles import read_sql, split_statements

OPS_TABLES = ("batches", "jobs")
PARTITION_BY = "year(event_timestamp), month(event_timestamp), day(event_timestamp)"


def connect(settings: Settings, *, read_only: bool = False, snapshot_version: int | None = None,
            snapshot_time: str | None = None) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB session with the lake attached under ``settings.lake_name``."""
    if settings.catalog is None or settings.data_path is None:
        raise ConfigError("The lake location is not resolved.",
                          "Call pipeline.services.resolve(settings) first.")
    if settings.catalog.kind == "sqlite":
        _prepare_sqlite(settings.catalog.path)
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
            if statement.startswith("ATTACH"):
                # The first ATTACH creates the catalog's metadata tables; two processes doing
                # that at once collide in Postgres ("duplicate key … pg_namespace"), so attaches
                # of one lake are serialized (they take milliseconds).
                with locks.hold(settings, "attach"):
                    con.execute(statement)
            else:
                con.execute(statement)
        except duckdb.Error as exc:
            con.close()
            if statement.startswith("ATTACH"):
                raise attach_error(settings, exc) from None
            raise
    # Lets SQL files reach DuckLake's own metadata tables wherever the catalog keeps them:
    # query('SELECT … FROM ' || getvariable('lake_metadata') || '.ducklake_data_file')
    schema = settings.lake_name if settings.catalog.kind == "postgres" else "main"
    con.execute(f"SET VARIABLE lake_metadata = '__ducklake_metadata_{settings.lake_name}.{schema}'")
    return con


def attach_error(settings: Settings, exc: duckdb.Error) -> PipelineError:
    """Say what was tried and whether trying again later can help."""
    assert settings.catalog is not None
    message = (f"Cannot open the lake catalog ({settings.catalog.describe()}): "
               f"{scrub_secrets(str(exc)).strip()}")
    text = str(exc).lower()
    if settings.catalog.kind == "postgres":
        if looks_transient(text):
            return CatalogUnavailable(message, "Check that the catalog Postgres runs and DUCKLAKE_CATALOG "
                                      "points at it (host, port, dbname, user, password).")
        return TerminalError(message, "Check DUCKLAKE_CATALOG (database, user, password).")
    if "lock" in text:
        return CatalogUnavailable(message, "A DuckDB catalog file can be open in one process at a time; "
                                  "use a Postgres catalog for concurrent writers.")
    return ConfigError(message, f"Check the path in DUCKLAKE_CATALOG (its folder must exist). "
                       f"Accepted forms: {ACCEPTED_FORMS}.")


def _prepare_sqlite(path) -> None:
    """WAL journal (readers do not block the writer) and a busy timeout for the first open."""
    import sqlite3

    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
            db.execute("PRAGMA busy_timeout = 30000")
            db.execute("PRAGMA journal_mode = WAL")
    except sqlite3.Error as exc:
        raise ConfigError(f"Cannot open the SQLite catalog {path}: {exc}.",
                          "Point DUCKLAKE_CATALOG=sqlite:PATH at a file in a writable folder.") from None


def table_names(con: duckdb.DuckDBPyConnection, settings: Settings) -> set[tuple[str, str]]:
    """Every ``(schema, table)`` the attached lake holds."""
    return {(schema, table) for schema, table in con.execute(
        "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = ?",
        [settings.lake_name]).fetchall()}


def _tables_exist(con: duckdb.DuckDBPyConnection, settings: Settings) -> tuple[bool, bool]:
    """(events table exists, every ops table exists)."""
    found = table_names(con, settings)
    ops = all((settings.ops_schema, t) in found for t in OPS_TABLES)
    return ("main", settings.lake_table) in found, ops


def ensure_tables(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """Create schemas, the events table (partitioned by event day) and the state table.

    Two first runs at once would both try to create them; a lock makes one wait for the
    other, and the re-check inside it then finds the tables.
    """
    if all(_tables_exist(con, settings)):
        return
    with locks.hold(settings, "setup"):
        events_exists, ops_exists = _tables_exist(con, settings)
        if events_exists and ops_exists:
            return
        con.execute("BEGIN")
        try:
            con.execute(f"CALL {settings.lake_name}.set_commit_message('event-lake', 'create lake tables')")
            for statement in split_statements(read_sql("lake_events.sql")):
                con.execute(statement.format(lake=settings.lake_name, table=settings.lake_table,
                                             ops=settings.ops_schema))
            if not events_exists:
                con.execute(f"ALTER TABLE {settings.events_table} SET PARTITIONED BY ({PARTITION_BY})")
            con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise
