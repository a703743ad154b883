"""Open a DuckDB session with the lake attached, from the statements :mod:`.attach_sql` plans."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

from pipeline import actions
from pipeline.errors import (
    CatalogUnavailable,
    ConfigError,
    LakeNotCreated,
    PipelineError,
    is_transient,
    service_error,
)
from pipeline.lake import extensions, instances, locks, ownership
from pipeline.lake.attach_sql import (
    SOURCE_ALIAS,
    extension_names,
    open_statements,
    session_settings,
    source_statements,
    storage_secret_sql,
)
from pipeline.lake.schema import column_types, ensure_tables
from pipeline.lake.session import Lake
from pipeline.process import cancellable
from pipeline.settings import ResolvedSettings
from pipeline.settings.catalog import ACCEPTED_FORMS, CatalogSpec
from pipeline.settings.pgdsn import PgDsn
from pipeline.sqltext import quote_literal
from pipeline.storage.folder import folder_of


def connect(settings: ResolvedSettings, *, read_only: bool = False, snapshot_version: int | None = None,
            snapshot_time: str | None = None, source: bool = False,
            own_sql: bool = False, catalog_role: PgDsn | None = None) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB instance with the lake attached under ``settings.lake_name``, of
    its own (a ``--sql`` session locks its configuration); :func:`lake_session` shares one.
    ``source``: the source Postgres attached read-only as ``src`` too. ``own_sql``: the instance
    runs only this program's SQL (:func:`.extensions.new_instance`). ``catalog_role``: a Postgres
    catalog attached as that role (a read-only SQL session's reader)."""
    catalog = settings.catalog
    if catalog.path is not None:
        catalog.path.parent.mkdir(parents=True, exist_ok=True)
    # staged batches on object storage are read through httpfs with their own scoped secret
    attach = _Attach(settings)
    staging_secret = attach.staging_secret()
    con = extensions.new_instance(*extension_names(catalog, settings.data_path),
                                  *(["postgres"] if source else []), *(["httpfs"] if staging_secret else []),
                                  own_sql=own_sql)
    try:
        statements = open_statements(
            settings.lake_name, catalog, settings.data_path, storage=settings.storage,
            show_secrets=True, read_only=read_only, snapshot_version=snapshot_version,
            snapshot_time=snapshot_time, catalog_role=catalog_role)
        for statement in statements:
            if statement.startswith("LOAD "):
                continue  # done above, from the wheels
            if statement.startswith("ATTACH"):
                attach.attach(con, statement, creates=not read_only)
            else:
                con.execute(statement)
        if staging_secret:
            con.execute(staging_secret)
        for statement in source_statements(settings.source_dsn) if source else ():
            con.execute(statement)
        _begin_session(con, settings.lake_name, settings.catalog.kind)
    except BaseException:
        con.close()
        raise
    return con


@contextmanager
def lake_session(settings: ResolvedSettings, *, read_only: bool = False, tables: bool = False,
                 snapshot_version: int | None = None, snapshot_time: str | None = None,
                 source: bool = False) -> Iterator[Lake]:
    """The lake attached for the block (a :class:`.session.Lake`) and closed after it, however
    the block ends; with
    ``tables``, the pipeline's tables made (or checked) first, as every writer needs; with
    ``source``, the source Postgres attached read-only as ``src`` (to compare or backfill).

    On a Postgres catalog, the sessions of one process share one attached instance per lake and
    mode (:mod:`.instances`). A time-travel session, and a lake in a DuckDB or SQLite file (which
    a process may open once, so a reader's and a writer's instance could not both stay open),
    get an instance of their own."""
    time_travel = snapshot_version is not None or snapshot_time is not None
    opened: contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]
    if settings.catalog.kind != "postgres" or time_travel:
        opened = instances.owned(connect(settings, read_only=read_only, snapshot_version=snapshot_version,
                                         snapshot_time=snapshot_time, source=source, own_sql=True))
    else:
        opened = _Attach(settings).shared(read_only, source)
    # a stop request ends a one-shot command's query now (a transaction in flight rolls back)
    with opened as con, cancellable(con.interrupt):
        lake = Lake.of(con, settings)
        if tables:  # every table of the image
            for table in lake.tables(settings.tables).values():
                ensure_tables(table, column_types(settings.promotion, settings.spark.reader))
        yield lake


def _begin_session(con: duckdb.DuckDBPyConnection, lake_name: str, catalog_kind: str) -> None:
    """What DuckDB keeps per connection, not per instance: settings and variables."""
    for statement in session_settings():
        con.execute(statement)
    # Lets SQL files reach DuckLake's own metadata tables wherever the catalog keeps them:
    # query('SELECT … FROM ' || getvariable('lake_metadata') || '.ducklake_data_file')
    schema = lake_name if catalog_kind == "postgres" else "main"
    con.execute(f"SET VARIABLE lake_metadata = '{_metadata_database(lake_name)}.{schema}'")


def _metadata_database(lake_name: str) -> str:
    """The catalog database DuckLake attaches beside the lake for its own tables."""
    return f"__ducklake_metadata_{lake_name}"


# DuckLake's words when a read-only attach finds no lake in the catalog (pinned by a test)
NOT_CREATED = "creating a new DuckLake is explicitly disabled"
# DuckLake's words when DATA_PATH differs from the one the catalog recorded (its advice names an
# ATTACH option, OVERRIDE_DATA_PATH, that is no setting of this product)
DATA_PATH_MOVED = re.compile(r'DATA_PATH parameter "([^"]*)" does not match existing data path in the '
                             r'catalog "([^"]*)"')


def not_created(lake_name: str, catalog: CatalogSpec) -> LakeNotCreated:
    return LakeNotCreated(f"The lake {lake_name} does not exist yet in DUCKLAKE_CATALOG="
                          f"{catalog.describe()}.",
                          f"The first {actions.RUN} creates it (or check that "
                          "DUCKLAKE_CATALOG and DUCKLAKE_NAME name the lake you mean).")


class _Attach:
    """How one lake is attached: its pooled instance, the secret its staged batches are read
    with, the serialized ATTACH, and what an ATTACH error means."""

    def __init__(self, settings: ResolvedSettings) -> None:
        self.settings = settings

    @contextmanager
    def shared(self, read_only: bool, source: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        settings = self.settings
        # pooled by everything the attach depends on (what its statements say, secrets included)
        key = (*open_statements(settings.lake_name, settings.catalog, settings.data_path,
                                storage=settings.storage, show_secrets=True, read_only=read_only),
               self.staging_secret(), *(source_statements(settings.source_dsn) if source else ()))
        # a round trip to each Postgres database the instance attached: the catalog, and the source
        databases = [_metadata_database(settings.lake_name), *([SOURCE_ALIAS] if source else [])]
        pings = [f"FROM postgres_query({quote_literal(database)}, 'SELECT 1')" for database in databases]

        def alive(con: duckdb.DuckDBPyConnection) -> None:
            for ping in pings:
                con.execute(ping)

        def opened() -> duckdb.DuckDBPyConnection:
            return connect(settings, read_only=read_only, source=source, own_sql=True)

        with instances.session(key, opened, alive) as con:
            if source:  # DuckDB caches an attached Postgres database's tables and columns: the session
                # sees the source as it is now (a column added since), as a freshly attached one did
                con.execute("CALL pg_clear_cache()")
            _begin_session(con, settings.lake_name, settings.catalog.kind)
            yield con

    def staging_secret(self) -> str | None:
        settings = self.settings
        return storage_secret_sql(settings.lake_name, settings.staging_path, settings.storage,
                                  show_secrets=True, role="staging")

    def attach(self, con: duckdb.DuckDBPyConnection, statement: str, *, creates: bool) -> None:
        settings = self.settings
        # The first ATTACH creates the catalog's metadata tables; two processes doing that at once
        # collide in Postgres ("duplicate key … pg_namespace"), so writable attaches of one lake are
        # serialized (they take milliseconds). A read-only one creates and migrates nothing (a
        # migration is one catalog transaction: it sees the lake before or after): it takes no lock,
        # and a read-only session's start (--sql) no connection and no psycopg for one.
        try:
            with locks.hold(settings, "attach") if creates else contextlib.nullcontext():
                if creates:  # a writable attach creates the lake if the catalog has none
                    ownership.refuse_before_creating(settings.catalog, settings.lake_name, settings.data_path,
                                                     folder_of(settings.data_path, settings.storage))
                con.execute(statement)
        except duckdb.Error as exc:
            raise self.error(exc) from None

    def error(self, exc: duckdb.Error) -> PipelineError:
        """Say what was tried and whether trying again later can help."""
        settings = self.settings
        catalog = settings.catalog
        if NOT_CREATED in str(exc):
            return not_created(settings.lake_name, catalog)
        if moved := DATA_PATH_MOVED.search(str(exc)):
            given, kept = moved.groups()
            return ConfigError(f"The lake {settings.lake_name} in DUCKLAKE_CATALOG={catalog.describe()} "
                               f"keeps its data files in {kept}, but DUCKLAKE_DATA_PATH is {given}.",
                               f"Set DUCKLAKE_DATA_PATH={kept} (a lake's data path is fixed when it is "
                               "created), or point DUCKLAKE_CATALOG or DUCKLAKE_NAME at the lake you mean.")
        where = f"Cannot open the lake catalog (DUCKLAKE_CATALOG={catalog.describe()})"
        if catalog.kind == "postgres":
            if is_transient(exc):  # as the attach lock's connection says it (a read-only attach takes none)
                where = f"Cannot reach the catalog (DUCKLAKE_CATALOG={catalog.describe()})"
            return service_error(exc, where, unavailable=CatalogUnavailable,
                                 transient_hint="Check that the catalog Postgres runs and DUCKLAKE_CATALOG "
                                 "points at it (host, port, dbname, user, password).",
                                 terminal_hint="Check DUCKLAKE_CATALOG (database, user, password).")
        if "lock" in str(exc).lower():
            return CatalogUnavailable(f"{where}: {exc}", "A DuckDB catalog file can be open in one process "
                                      "at a time; use a Postgres catalog for concurrent writers.")
        return ConfigError(f"{where}: {exc}", f"Check the path in DUCKLAKE_CATALOG (it must be a file in a "
                           f"writable folder). Accepted forms: {ACCEPTED_FORMS}.")
