"""Pure planning of the SQL that opens the lake: extension loads, secrets, ATTACH.

The same statements serve the pipeline and ``--print-attach`` (which a user pastes into
the ``duckdb`` CLI), so what users see is exactly what runs. Credentials only ever appear
inside ``CREATE SECRET`` and are masked unless ``show_secrets`` is set.
"""

from __future__ import annotations

from pipeline.errors import MASK
from pipeline.settings.catalog import CatalogSpec
from pipeline.settings.model import StorageOptions
from pipeline.settings.pgdsn import PgDsn
from pipeline.sqltext import quote_literal
from pipeline.storage.folder import is_object_store, split_uri
from pipeline.storage.object_store import SECRET_TYPES, ObjectStore

# Explicit DuckLake conflict-retry settings (DuckLake defaults: 10 attempts, 100 ms, x1.5).
# Promoters are serialized by a lock, but maintenance and ad-hoc writers may still race.
RETRY_SETTINGS = {"ducklake_max_retry_count": 100, "ducklake_retry_wait_ms": 100,
                  "ducklake_retry_backoff": 1.5}
# A SQLite catalog: WAL so readers never block the writer, and a busy timeout so a second
# process waits for the lock instead of failing at once.
SQLITE_OPTIONS = ("META_JOURNAL_MODE 'WAL'", "META_BUSY_TIMEOUT 30000")


def extension_names(catalog: CatalogSpec, data_path: str) -> list[str]:
    names = {"postgres": ["postgres"], "sqlite": ["sqlite"], "duckdb": []}[catalog.kind]
    if is_object_store(data_path):
        names.append("httpfs")
    return [*names, "ducklake"]


def postgres_secret_sql(secret_name: str, dsn: PgDsn, show_secrets: bool) -> str:
    """A DuckDB ``postgres`` secret: the one place a Postgres password reaches DuckDB."""
    # no password (trust or peer auth, .pgpass) has nothing to hide: *** would not work when pasted
    password = dsn.password.reveal() if show_secrets or not dsn.password else MASK
    return (
        f"CREATE OR REPLACE SECRET {secret_name} (TYPE postgres, "
        f"HOST {quote_literal(dsn.host)}, PORT {dsn.port}, DATABASE {quote_literal(dsn.dbname)}, "
        f"USER {quote_literal(dsn.user)}, PASSWORD {quote_literal(password)})"
    )


def storage_secret_sql(lake_name: str, data_path: str, storage: StorageOptions,
                       show_secrets: bool, role: str = "storage") -> str | None:
    """A DuckDB secret for the object store at ``data_path`` (scoped to it), named
    ``<lake>_<role>``: ``storage`` for the lake's data files, ``staging`` for staged batches."""
    scheme = split_uri(data_path)[0]
    if scheme not in SECRET_TYPES:
        return None
    parts = ObjectStore(storage).duckdb_secret(scheme, show_secrets)
    parts.append(f"SCOPE {quote_literal(data_path)}")
    return f"CREATE OR REPLACE SECRET {lake_name}_{role} ({', '.join(parts)})"


# what a lake session opened with the source (verify, reconcile) calls the source Postgres
SOURCE_ALIAS = "src"


def source_statements(dsn: PgDsn, alias: str = SOURCE_ALIAS) -> list[str]:
    """Attach the source Postgres read-only as ``alias`` (credentials in a secret), its
    sessions in the source's time zone like every other reader's."""
    from psycopg.conninfo import make_conninfo

    # its text as UTF-8, what DuckDB holds (a LATIN1 database's bytes were "invalid unicode")
    options = dsn.session_options()
    target = make_conninfo("", client_encoding="UTF8", **({"options": options} if options else {}))
    return [postgres_secret_sql(f"{alias}_secret", dsn, show_secrets=True),
            f"ATTACH {quote_literal(target)} AS {alias} (TYPE postgres, SECRET {alias}_secret, READ_ONLY)"]


def attach_sql(lake_name: str, catalog: CatalogSpec, data_path: str, *,
               read_only: bool = False, snapshot_version: int | None = None,
               snapshot_time: str | None = None, catalog_role: PgDsn | None = None) -> str:
    options = [f"DATA_PATH {quote_literal(data_path)}"]
    if catalog.pg is not None:
        path = f"ducklake:{(catalog_role or catalog.pg).params_without_password()}"
        options.append(f"METADATA_SCHEMA {quote_literal(lake_name)}")
        options.append(f"METADATA_PARAMETERS MAP {{'TYPE': 'postgres', 'SECRET': '{lake_name}_catalog'}}")
    elif catalog.kind == "sqlite":
        path = f"ducklake:sqlite:{catalog.path}"
        options += SQLITE_OPTIONS
    else:
        path = f"ducklake:{catalog.path}"
    if read_only:
        options.append("READ_ONLY")
    if snapshot_version is not None:
        options.append(f"SNAPSHOT_VERSION {int(snapshot_version)}")
    if snapshot_time is not None:
        options.append(f"SNAPSHOT_TIME {quote_literal(snapshot_time)}")
    return f"ATTACH {quote_literal(path)} AS {lake_name} ({', '.join(options)})"


def session_settings() -> list[str]:
    """The settings every connection to the lake makes (DuckDB keeps them per connection)."""
    return ["SET TimeZone = 'UTC'", *(f"SET {key} = {value}" for key, value in RETRY_SETTINGS.items())]


def open_statements(lake_name: str, catalog: CatalogSpec, data_path: str, *,
                    storage: StorageOptions | None = None, show_secrets: bool = False,
                    read_only: bool = False, snapshot_version: int | None = None,
                    snapshot_time: str | None = None, catalog_role: PgDsn | None = None) -> list[str]:
    """Every statement needed to open the lake in a fresh DuckDB session, in order;
    ``catalog_role``: a Postgres catalog reached as that role instead of DUCKLAKE_CATALOG's."""
    statements = [f"LOAD {name}" for name in extension_names(catalog, data_path)]
    statements += session_settings()
    if catalog.pg is not None:
        role = catalog_role or catalog.pg
        statements.append(postgres_secret_sql(f"{lake_name}_catalog", role, show_secrets))
    secret = storage_secret_sql(lake_name, data_path, storage or StorageOptions(), show_secrets)
    if secret:
        statements.append(secret)
    statements.append(attach_sql(lake_name, catalog, data_path, read_only=read_only,
                                 snapshot_version=snapshot_version, snapshot_time=snapshot_time,
                                 catalog_role=catalog_role))
    return statements
