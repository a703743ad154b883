"""Pure planning of the SQL that opens the lake: extension loads, secrets, ATTACH.

The same statements serve the pipeline and ``--print-attach`` (which a user pastes into
the ``duckdb`` CLI), so what users see is exactly what runs. Credentials only ever appear
inside ``CREATE SECRET`` and are masked unless ``show_secrets`` is set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.catalog import CatalogSpec
from pipeline.secrets import MASK

# Explicit DuckLake conflict-retry settings (DuckLake defaults: 10 attempts, 100 ms, x1.5).
# Promoters are serialized by a lock, but maintenance and ad-hoc writers may still race.
RETRY_SETTINGS = {"ducklake_max_retry_count": 100, "ducklake_retry_wait_ms": 100,
                  "ducklake_retry_backoff": 1.5}


def quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass(frozen=True)
class StorageOptions:
    """Object-storage settings for the data path (read from ``S3_*`` environment keys)."""

    key_id: str | None = None
    secret: str | None = None
    region: str | None = None
    endpoint: str | None = None
    url_style: str | None = None
    use_ssl: bool | None = None
    account_id: str | None = None  # Cloudflare R2

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StorageOptions:
        env = os.environ if env is None else env
        get = lambda key: (env.get(key) or "").strip() or None  # noqa: E731
        ssl = get("S3_USE_SSL")
        return cls(key_id=get("S3_ACCESS_KEY_ID"), secret=get("S3_SECRET_ACCESS_KEY"),
                   region=get("S3_REGION"), endpoint=get("S3_ENDPOINT"),
                   url_style=get("S3_URL_STYLE"),
                   use_ssl=None if ssl is None else ssl.lower() in ("1", "true", "yes"),
                   account_id=get("R2_ACCOUNT_ID"))


def extension_names(catalog: CatalogSpec, data_path: str) -> list[str]:
    names = {"postgres": ["postgres"], "sqlite": ["sqlite"], "duckdb": []}[catalog.kind]
    if "://" in data_path:
        names.append("httpfs")
    return [*names, "ducklake"]


def catalog_secret_sql(lake_name: str, catalog: CatalogSpec, show_secrets: bool) -> str | None:
    if catalog.pg is None:
        return None
    pg = catalog.pg
    password = pg.password.reveal() if show_secrets else MASK
    return (
        f"CREATE OR REPLACE SECRET {lake_name}_catalog (TYPE postgres, "
        f"HOST {quote_literal(pg.host)}, PORT {pg.port}, DATABASE {quote_literal(pg.dbname)}, "
        f"USER {quote_literal(pg.user)}, PASSWORD {quote_literal(password)})"
    )


def storage_secret_sql(lake_name: str, data_path: str, storage: StorageOptions,
                       show_secrets: bool) -> str | None:
    scheme = data_path.split("://", 1)[0].lower() if "://" in data_path else None
    if scheme not in ("s3", "gs", "gcs", "r2"):
        return None
    kind = {"s3": "s3", "gs": "gcs", "gcs": "gcs", "r2": "r2"}[scheme]
    parts = [f"TYPE {kind}"]
    if storage.key_id:
        parts.append(f"KEY_ID {quote_literal(storage.key_id)}")
        secret = storage.secret if show_secrets else MASK
        parts.append(f"SECRET {quote_literal(secret or '')}")
    else:
        parts.append("PROVIDER credential_chain")
    if kind == "r2" and storage.account_id:
        parts.append(f"ACCOUNT_ID {quote_literal(storage.account_id)}")
    if storage.region:
        parts.append(f"REGION {quote_literal(storage.region)}")
    if storage.endpoint:
        parts.append(f"ENDPOINT {quote_literal(storage.endpoint)}")
    if storage.url_style:
        parts.append(f"URL_STYLE {quote_literal(storage.url_style)}")
    if storage.use_ssl is not None:
        parts.append(f"USE_SSL {'true' if storage.use_ssl else 'false'}")
    parts.append(f"SCOPE {quote_literal(data_path)}")
    return f"CREATE OR REPLACE SECRET {lake_name}_storage ({', '.join(parts)})"


def attach_sql(lake_name: str, catalog: CatalogSpec, data_path: str, *,
               read_only: bool = False, snapshot_version: int | None = None,
               snapshot_time: str | None = None) -> str:
    options = [f"DATA_PATH {quote_literal(data_path)}"]
    if catalog.pg is not None:
        pg = catalog.pg
        path = f"ducklake:{pg.with_dbname(pg.dbname).params_without_password()}"
        options.append(f"METADATA_SCHEMA {quote_literal(lake_name)}")
        options.append(f"METADATA_PARAMETERS MAP {{'TYPE': 'postgres', 'SECRET': '{lake_name}_catalog'}}")
    elif catalog.kind == "sqlite":
        path = f"ducklake:sqlite:{catalog.path}"
    else:
        path = f"ducklake:{catalog.path}"
    if read_only:
        options.append("READ_ONLY")
    if snapshot_version is not None:
        options.append(f"SNAPSHOT_VERSION {int(snapshot_version)}")
    if snapshot_time is not None:
        options.append(f"SNAPSHOT_TIME {quote_literal(snapshot_time)}")
    return f"ATTACH {quote_literal(path)} AS {lake_name} ({', '.join(options)})"


def open_statements(lake_name: str, catalog: CatalogSpec, data_path: str, *,
                    storage: StorageOptions | None = None, show_secrets: bool = False,
                    read_only: bool = False, snapshot_version: int | None = None,
                    snapshot_time: str | None = None) -> list[str]:
    """Every statement needed to open the lake in a fresh DuckDB session, in order."""
    statements = [f"LOAD {name}" for name in extension_names(catalog, data_path)]
    statements.append("SET TimeZone = 'UTC'")
    statements += [f"SET {key} = {value}" for key, value in RETRY_SETTINGS.items()]
    for secret in (catalog_secret_sql(lake_name, catalog, show_secrets),
                   storage_secret_sql(lake_name, data_path, storage or StorageOptions(), show_secrets)):
        if secret:
            statements.append(secret)
    statements.append(attach_sql(lake_name, catalog, data_path, read_only=read_only,
                                 snapshot_version=snapshot_version, snapshot_time=snapshot_time))
    return statements
