"""One typed settings object, built once from the environment, ``.env`` and CLI flags.

Unset service settings stay ``None`` here; :mod:`pipeline.services` fills them with the
embedded Postgres under ``EVENT_LAKE_HOME`` when the pipeline actually needs them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

from pipeline.catalog import CatalogSpec
from pipeline.durations import parse_duration
from pipeline.errors import ConfigError
from pipeline.pgdsn import PgDsn

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Every environment key the product reads, with its meaning (kept in sync with .env.example;
# tests/test_docs.py checks that each one is documented there and in the README).
ENV_KEYS: dict[str, str] = {
    "SOURCE_PG_DSN": "Postgres holding the source events table (embedded when unset)",
    "SOURCE_TABLE": "source table, schema-qualified (default public.events)",
    "DUCKLAKE_CATALOG": "catalog database: postgresql://…, key=value, sqlite:PATH or duckdb:PATH",
    "DUCKLAKE_DATA_PATH": "where DuckLake writes Parquet data files (folder or s3://…)",
    "DUCKLAKE_NAME": "attach alias and metadata schema of the lake (default lake)",
    "STAGING_PATH": "folder for staged batches (default .lake/staging)",
    "SPARK_MASTER": "Spark master URL (default local[*])",
    "SPARK_REMOTE": "Spark Connect URL sc://host:15002 (overrides SPARK_MASTER)",
    "SPARK_JDBC_JAR": "path to the Postgres JDBC driver jar for Spark",
    "LOOKBACK": "tolerance for late events, e.g. 15m (default 15m)",
    "EVENT_LAKE_HOME": "folder of the embedded default (default ./.lake)",
    "LOAD_EVERY": "scheduler: load interval (default 1h)",
    "EXPIRE_EVERY": "scheduler: snapshot expiry interval (default 1d)",
    "COMPACT_EVERY": "scheduler: compaction interval (default 1w)",
    "RETENTION": "snapshots younger than this stay available for time travel (default 7d)",
}


@dataclass(frozen=True)
class Settings:
    """Everything a command needs to know; secrets are wrapped and never printed."""

    home: Path
    source_dsn: PgDsn | None
    source_table: str
    catalog: CatalogSpec | None
    data_path: str | None
    lake_name: str
    staging_path: Path
    spark_master: str
    spark_remote: str | None
    spark_jdbc_jar: str | None
    lookback: timedelta
    lake_table: str = "events"
    ops_schema: str = "ops"

    @property
    def source_schema_name(self) -> str:
        return self.source_table.split(".")[0] if "." in self.source_table else "public"

    @property
    def source_table_name(self) -> str:
        return self.source_table.split(".")[-1]

    @property
    def events_table(self) -> str:
        """Fully qualified lake table, e.g. ``lake.main.events``."""
        return f"{self.lake_name}.main.{self.lake_table}"

    @property
    def batches_table(self) -> str:
        return f"{self.lake_name}.{self.ops_schema}.batches"

    @property
    def staging_table_dir(self) -> Path:
        return self.staging_path / self.lake_table

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def load_settings(
    env: Mapping[str, str] | None = None, *, dotenv: bool = True, **overrides: object
) -> Settings:
    """Build settings from ``env`` (default: ``os.environ`` after reading ``.env``)."""
    if env is None:
        if dotenv:
            from dotenv import load_dotenv

            load_dotenv(Path.cwd() / ".env", override=False)
        env = os.environ
    get = lambda key: (env.get(key) or "").strip() or None  # noqa: E731

    home = Path(get("EVENT_LAKE_HOME") or ".lake").expanduser().absolute()
    source_table = get("SOURCE_TABLE") or "public.events"
    if not all(_IDENT.match(part) for part in source_table.split(".")) or source_table.count(".") > 1:
        raise ConfigError(f"SOURCE_TABLE {source_table!r} is not a table name.",
                          "Use schema.table with letters, digits and underscores, e.g. public.events.")
    lake_name = get("DUCKLAKE_NAME") or "lake"
    if not _IDENT.match(lake_name):
        raise ConfigError(f"DUCKLAKE_NAME {lake_name!r} is not a valid name.",
                          "Use letters, digits and underscores, starting with a letter.")
    settings = Settings(
        home=home,
        source_dsn=PgDsn.parse(get("SOURCE_PG_DSN"), "SOURCE_PG_DSN") if get("SOURCE_PG_DSN") else None,
        source_table=source_table if "." in source_table else f"public.{source_table}",
        catalog=CatalogSpec.parse(get("DUCKLAKE_CATALOG")) if get("DUCKLAKE_CATALOG") else None,
        data_path=get("DUCKLAKE_DATA_PATH"),
        lake_name=lake_name,
        staging_path=Path(get("STAGING_PATH") or home / "staging").expanduser().absolute(),
        spark_master=get("SPARK_MASTER") or "local[*]",
        spark_remote=get("SPARK_REMOTE"),
        spark_jdbc_jar=get("SPARK_JDBC_JAR"),
        lookback=parse_duration(get("LOOKBACK") or "15m", "LOOKBACK"),
        lake_table=source_table.split(".")[-1],
    )
    return settings.with_overrides(**overrides)
