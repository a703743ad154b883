"""The settings' parts: what every command knows, before and after the embedded default.

:class:`SettingsFields` holds what the environment, ``.env`` and flags say (service locations may be
unset) and what follows from it; :class:`~pipeline.settings.load.Settings` is that, built from them
(or from keywords), and :class:`~pipeline.settings.resolve.ResolvedSettings` the same after
:func:`~pipeline.settings.resolve.resolve` filled the locations in, so code past resolution never
has to ask whether a location exists. Secrets are wrapped (:class:`~pipeline.settings.secret.Secret`)
and never printed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import TypedDict

from pipeline.errors import ConfigError, scrub_secrets
from pipeline.settings.catalog import CatalogSpec
from pipeline.settings.pgdsn import PgDsn
from pipeline.settings.secret import Secret

# a payload key TYPED_KEYS may type: it becomes the column details_<key> (pipeline/lake/payload_fields.py)
PAYLOAD_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,55}$")


class Engine(StrEnum):
    """What extracts a batch (``--engine``)."""

    SPARK = "spark"  # PySpark: local[*], a cluster or Spark Connect
    DLT = "dlt"  # dlt's sql_database source, in this process


class Reader(StrEnum):
    """How Spark tasks read their slice of the source."""

    ARROW = "arrow"  # each task reads with ADBC and writes Parquet itself: no JDBC jar
    JDBC = "jdbc"  # Spark's JDBC reader and Parquet writer: needs the Postgres JDBC driver


class StagingWriter(StrEnum):
    """Who writes the staging files."""

    EXECUTORS = "executors"  # each task writes its own (a shared path or object storage)
    DRIVER = "driver"  # the driver writes them from Arrow (executors share nothing with it)


class Promotion(StrEnum):
    """How a staged batch joins the lake (pipeline.promote)."""

    ZERO_COPY = "zero-copy"  # Spark writes the lake's own files; promotion registers them
    COPY = "copy"  # promotion inserts the staged rows


class SchemaChanges(StrEnum):
    """What the lake does when a source table's columns change (docs/schema-changes.md; dlt's
    schema contracts, by column identity)."""

    EVOLVE = "evolve"  # follow it: add, rename, drop, in the commit of the first batch carrying it
    FREEZE = "freeze"  # refuse it by name: the load stops before reading, nothing lost
    DISCARD_VALUE = "discard_value"  # follow renames and drops; a column added is not loaded


DEFAULT_TIME_COLUMN, DEFAULT_ID_COLUMN = "event_timestamp", "event_id"


_KEY_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class SubjectKey:
    """Where a table's rows name the person they are about (SUBJECT_KEY, for ``--erase``): a column
    (``user_id``), or a path into a JSON column (``details.user_id``: the column, then the keys)."""

    column: str
    path: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str, what: str) -> SubjectKey:
        """``column`` or ``column.key[.key…]``; a ConfigError naming ``what`` (the setting) otherwise."""
        parts = text.strip().split(".")
        if not all(_KEY_PART.match(part) for part in parts):
            raise ConfigError(f"{what}: {text.strip()!r} is not a column or a column.key path.",
                              "Name a column (SUBJECT_KEY=user_id) or a path into a JSON column "
                              "(SUBJECT_KEY=details.user_id): letters, digits and _, separated by dots.")
        return cls(parts[0], tuple(parts[1:]))

    def __str__(self) -> str:
        return ".".join((self.column, *self.path))


@dataclass(frozen=True)
class TableSpec:
    """One table of the image, the only home of a table's options: where it is read (``SOURCE_TABLE``,
    or one entry of ``SOURCE_TABLES``: ``schema.table(time=…, id=…, subject=…)`` or the positional
    ``schema.table[:time_column[:id_column]]``), which column dates a row and which names it, and
    where a row names its person (``subject=`` or SUBJECT_KEY, for ``--erase``). It lands as
    ``main.<name>`` in the lake."""

    qualified: str  # schema.table in the source
    time_column: str = DEFAULT_TIME_COLUMN
    id_column: str = DEFAULT_ID_COLUMN
    subject: SubjectKey | None = None  # None: its rows name no person (--erase leaves it alone)
    schema_changes: SchemaChanges | None = None  # None: SCHEMA_CHANGES

    @property
    def name(self) -> str:
        """The lake table it lands in (in the lake's main schema)."""
        return self.qualified.split(".")[-1]

    @property
    def schema(self) -> str:
        """The source schema it is read from."""
        return self.qualified.split(".")[0]

    @property
    def names_own_columns(self) -> bool:
        """Does the table name and date a row by columns of its own (``time=``, ``id=``)?"""
        return (self.id_column, self.time_column) != (DEFAULT_ID_COLUMN, DEFAULT_TIME_COLUMN)


@dataclass(frozen=True, kw_only=True)
class SparkOptions:
    """How to reach Spark and how the local driver is started."""

    master: str
    remote: str | None  # Spark Connect URL; wins over ``master``
    jdbc_jar: str | None
    driver_memory: str
    executor_wait: timedelta = timedelta(seconds=60)  # a cluster without executors: give up after this
    load_timeout: timedelta = timedelta(0)  # an extraction running longer is cancelled; 0: no bound
    ui: bool
    verbose: bool
    conf: dict[str, str] = field(default_factory=dict)  # SPARK_CONF and --spark-conf, passed through
    partitions: int | None = None  # read slices (tasks); None: planned from rows and task slots
    reader: Reader = Reader.ARROW
    class_archive: Path | None = None  # folder of the driver JVM's class archive; None: none

    @property
    def shown(self) -> str:
        """Where Spark runs, as messages name it: a Connect address's token masked."""
        return scrub_secrets(self.remote or self.master)


@dataclass(frozen=True, kw_only=True)
class StorageOptions:
    """Object-storage settings for an ``s3://``, ``gs://`` or ``r2://`` data path."""

    key_id: str | None = None
    secret: Secret | None = None
    region: str | None = None
    endpoint: str | None = None
    url_style: str | None = None
    use_ssl: bool | None = None
    account_id: str | None = None  # Cloudflare R2


@dataclass(frozen=True, kw_only=True)
class Intervals:
    """How often the scheduler runs each job, and how long snapshots stay for time travel.
    (Defaults live with every other default, in :mod:`pipeline.settings.keys`.)"""

    load: timedelta
    expire: timedelta
    follow: timedelta = timedelta(seconds=2)  # --follow's load cadence
    compact: timedelta
    compact_files: int = 500  # small files waiting to be merged that make compaction due now; 0: never
    retention: timedelta
    reconcile: timedelta
    reconcile_since: timedelta | None  # how far back reconcile compares; None: all of history


SettingValue = str | int | float | bool | timedelta | Path | None


class SettingsKeywords(TypedDict, total=False):
    """``Settings(...)``'s keywords: the environment keys in lower case (a test keeps them equal)."""

    backfill_batch_rows: SettingValue
    compact_every: SettingValue
    compact_files: SettingValue
    ducklake_catalog: SettingValue
    ducklake_catalog_file: SettingValue
    ducklake_catalog_reader: SettingValue
    ducklake_catalog_reader_file: SettingValue
    ducklake_data_path: SettingValue
    ducklake_name: SettingValue
    erasure_key: SettingValue
    erasure_key_file: SettingValue
    event_lake_home: SettingValue
    expire_every: SettingValue
    follow_every: SettingValue
    load_every: SettingValue
    load_timeout: SettingValue
    lookback: SettingValue
    leave_image: SettingValue
    metrics_host: SettingValue
    metrics_port: SettingValue
    metrics_token: SettingValue
    metrics_token_file: SettingValue
    promotion: SettingValue
    r2_account_id: SettingValue
    reconcile_every: SettingValue
    reconcile_since: SettingValue
    retention: SettingValue
    s3_access_key_id: SettingValue
    s3_endpoint: SettingValue
    s3_region: SettingValue
    s3_secret_access_key: SettingValue
    s3_secret_access_key_file: SettingValue
    s3_url_style: SettingValue
    s3_use_ssl: SettingValue
    schema_changes: SettingValue
    schema_drift: SettingValue
    source_arrival_column: SettingValue
    source_pg_dsn: SettingValue
    source_pg_dsn_file: SettingValue
    source_table: SettingValue
    source_tables: SettingValue
    source_retention: SettingValue
    source_timezone: SettingValue
    spark_class_archive: SettingValue
    spark_conf: SettingValue
    spark_driver_memory: SettingValue
    spark_executor_wait: SettingValue
    spark_jdbc_jar: SettingValue
    spark_master: SettingValue
    spark_partitions: SettingValue
    spark_reader: SettingValue
    spark_remote: SettingValue
    spark_ui: SettingValue
    spark_verbose: SettingValue
    sql_memory: SettingValue
    staging_path: SettingValue
    staging_writer: SettingValue
    subject_key: SettingValue
    typed_keys: SettingValue


@dataclass(frozen=True, kw_only=True)
class SettingsFields:
    """Everything a command needs to know, as :class:`~pipeline.settings.load.Settings` holds it (its
    fields, read and checked by :func:`~pipeline.settings.load.load_settings`, and what they say)."""

    home: Path
    source_dsn: PgDsn | None
    # every table one run reads under one snapshot: SOURCE_TABLES, or SOURCE_TABLE alone; never empty
    tables: tuple[TableSpec, ...]
    # LEAVE_IMAGE: a load may leave out tables its tables were last loaded with as one image
    leave_image: bool = False
    catalog: CatalogSpec | None
    # DUCKLAKE_CATALOG=embedded: the embedded catalog chosen beside a source of one's own (never silently)
    embedded_catalog_chosen: bool = False
    data_path: str | None
    lake_name: str
    staging_path: str  # an absolute folder or s3://bucket/prefix
    staging_writer: StagingWriter
    promotion: Promotion = Promotion.ZERO_COPY
    schema_changes: SchemaChanges = SchemaChanges.EVOLVE  # a table's own in SOURCE_TABLES wins
    lookback: timedelta
    # how far back the source keeps its rows (0: all): older ones are the lake's history alone
    source_retention: timedelta = timedelta(0)
    backfill_rows: int = 5_000_000  # a history (first load, a table added later) is read in parts this size
    arrival_column: str | None = "created_at"  # read only rows that arrived since (None: the look-back)
    source_timezone: str | None = None  # naive source columns are wall-clock time there
    spark: SparkOptions
    intervals: Intervals
    storage: StorageOptions = field(default_factory=StorageOptions)
    sql_memory: str = "2GB"  # DuckDB's memory_limit of a --sql session
    metrics_host: str = "127.0.0.1"  # the web server (/metrics, /healthz, dashboard)
    # kept as given and checked where it is used (--schedule, --serve): a bad port must not
    # stop a --run that serves nothing
    metrics_port_text: str = "8900"
    metrics_port_name: str = "METRICS_PORT"  # the key or flag that gave it, for the error
    metrics_token: Secret | None = None  # bearer token for every path but /healthz
    erasure_key: Secret | None = None  # ERASURE_KEY: the receipts' keyed hash (None: the lake's id)
    # TYPED_KEYS: None = auto (decided from the source when a table is made); else the keys to type
    typed_keys: tuple[str, ...] | None = None
    ops_schema: str = "ops"

    def __post_init__(self) -> None:
        if not self.tables:  # a caller's mistake: every path that builds settings names a table
            raise ValueError("settings name no table: tables holds SOURCE_TABLES or SOURCE_TABLE")

    def one_table(self, flag: str) -> str:
        """The lake table (``main.<name>``) a one-table operation speaks of when ``flag`` (how the caller
        names a table) is not given: the only one; with several, a ConfigError naming them (the first
        listed is not the image)."""
        names = [f"main.{table.name}" for table in self.tables]
        if len(names) > 1:
            raise ConfigError(f"The lake holds {len(names)} tables ({', '.join(names)}): say which one.",
                              f"Give {flag} with one of them, e.g. {flag} {names[0]}.")
        return names[0]

    @property
    def metrics_port(self) -> int:
        """The web server's port; 0: the scheduler serves nothing."""
        text = self.metrics_port_text
        if not text.isdigit() or int(text) > 65535:
            raise ConfigError(f"{self.metrics_port_name} {text!r} is not a port number (0-65535).",
                              f"Set {self.metrics_port_name} to a free port such as 8900 "
                              "(0 turns the scheduler's server off).")
        return int(text)

    @property
    def subject_keys(self) -> Mapping[str, SubjectKey]:
        """Lake table name -> where its rows name their person (``--erase``): the tables that say."""
        return {table.name: table.subject for table in self.tables if table.subject is not None}

    def schema_changes_of(self, qualified: str) -> SchemaChanges:
        """The schema contract of the source table ``qualified`` (schema.table): its own, else the default."""
        own = next((t.schema_changes for t in self.tables if t.qualified == qualified), None)
        return own or self.schema_changes

    def lake_table(self, table: TableSpec) -> str:
        """Where ``table`` lands, fully qualified, e.g. ``lake.main.events``."""
        return f"{self.lake_name}.main.{table.name}"

    @property
    def batches_table(self) -> str:
        return f"{self.lake_name}.{self.ops_schema}.batches"

    @property
    def quarantine_table(self) -> str:
        return f"{self.lake_name}.{self.ops_schema}.quarantine"
