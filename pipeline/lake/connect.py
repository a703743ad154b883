"""Open a DuckDB session with the lake attached, from the statements :mod:`.attach_sql` plans."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

from pipeline import invocation
from pipeline.errors import CatalogUnavailable, ConfigError, LakeNotCreated, PipelineError, service_error
from pipeline.lake import extensions, locks
from pipeline.lake.attach_sql import extension_names, open_statements, storage_secret_sql
from pipeline.lake.schema import ensure_tables
from pipeline.settings import ResolvedSettings
from pipeline.settings.catalog import ACCEPTED_FORMS


def connect(settings: ResolvedSettings, *, read_only: bool = False, snapshot_version: int | None = None,
            snapshot_time: str | None = None) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB session with the lake attached under ``settings.lake_name``."""
    catalog = settings.catalog
    if catalog.path is not None:
        catalog.path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    try:
        extensions.load(con, *extension_names(catalog, settings.data_path))
        statements = open_statements(
            settings.lake_name, catalog, settings.data_path, storage=settings.storage,
            show_secrets=True, read_only=read_only, snapshot_version=snapshot_version,
            snapshot_time=snapshot_time)
        for statement in statements:
            if statement.startswith("LOAD "):
                continue  # done above, from the wheels
            if statement.startswith("ATTACH"):
                _attach(con, settings, statement)
            else:
                con.execute(statement)
        # staged batches on object storage are read through httpfs with their own scoped secret
        staging_secret = storage_secret_sql(settings.lake_name, settings.staging_path, settings.storage,
                                            show_secrets=True, role="staging")
        if staging_secret:
            extensions.load(con, "httpfs")
            con.execute(staging_secret)
    except BaseException:
        con.close()
        raise
    # Lets SQL files reach DuckLake's own metadata tables wherever the catalog keeps them:
    # query('SELECT … FROM ' || getvariable('lake_metadata') || '.ducklake_data_file')
    schema = settings.lake_name if catalog.kind == "postgres" else "main"
    con.execute(f"SET VARIABLE lake_metadata = '__ducklake_metadata_{settings.lake_name}.{schema}'")
    return con


@contextmanager
def lake_session(settings: ResolvedSettings, *, read_only: bool = False, tables: bool = False,
                 snapshot_version: int | None = None, snapshot_time: str | None = None
                 ) -> Iterator[duckdb.DuckDBPyConnection]:
    """The lake attached for the block and closed after it, however the block ends; with
    ``tables``, the pipeline's tables made (or checked) first, as every writer needs."""
    con = connect(settings, read_only=read_only, snapshot_version=snapshot_version,
                  snapshot_time=snapshot_time)
    try:
        if tables:
            ensure_tables(con, settings)
        yield con
    finally:
        con.close()


def _attach(con: duckdb.DuckDBPyConnection, settings: ResolvedSettings, statement: str) -> None:
    # The first ATTACH creates the catalog's metadata tables; two processes doing that at once
    # collide in Postgres ("duplicate key … pg_namespace"), so attaches of one lake are
    # serialized (they take milliseconds).
    try:
        with locks.hold(settings, "attach"):
            con.execute(statement)
    except duckdb.Error as exc:
        raise attach_error(settings, exc) from None


# DuckLake's words when a read-only attach finds no lake in the catalog (pinned by a test)
NOT_CREATED = "creating a new DuckLake is explicitly disabled"


def attach_error(settings: ResolvedSettings, exc: duckdb.Error) -> PipelineError:
    """Say what was tried and whether trying again later can help."""
    catalog = settings.catalog
    if NOT_CREATED in str(exc):
        return LakeNotCreated(f"The lake {settings.lake_name} does not exist yet in DUCKLAKE_CATALOG="
                              f"{catalog.describe()}.",
                              f"The first {invocation.RUN} creates it (or check that "
                              "DUCKLAKE_CATALOG and DUCKLAKE_NAME name the lake you mean).")
    where = f"Cannot open the lake catalog (DUCKLAKE_CATALOG={catalog.describe()})"
    if catalog.kind == "postgres":
        return service_error(exc, where, unavailable=CatalogUnavailable,
                             transient_hint="Check that the catalog Postgres runs and DUCKLAKE_CATALOG "
                             "points at it (host, port, dbname, user, password).",
                             terminal_hint="Check DUCKLAKE_CATALOG (database, user, password).")
    if "lock" in str(exc).lower():
        return CatalogUnavailable(f"{where}: {exc}", "A DuckDB catalog file can be open in one process "
                                  "at a time; use a Postgres catalog for concurrent writers.")
    return ConfigError(f"{where}: {exc}", f"Check the path in DUCKLAKE_CATALOG (it must be a file in a "
                       f"writable folder). Accepted forms: {ACCEPTED_FORMS}.")
