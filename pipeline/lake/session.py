"""An open lake: the DuckDB connection a lake session attached, and the names of what it holds.

:func:`pipeline.lake.connect.lake_session` yields one. The functions of ``lake/``, ``promote/``
and ``ops/`` that read or write the lake take it instead of a connection and the whole settings:
what they need to know about the lake (its tables, its ops tables, its data folder) is here, and
anything else they need is an argument of its own."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import duckdb

from pipeline.columns import ID, TIME, canonical_relation, own_name
from pipeline.id_checksum import IdKind
from pipeline.lake import locks
from pipeline.sqltext import one_row, quote_literal
from pipeline.storage.folder import Folder, folder_of

if TYPE_CHECKING:
    from collections.abc import Iterable
    from contextlib import AbstractContextManager

    from pipeline.settings import ResolvedSettings, TableSpec
    from pipeline.settings.catalog import CatalogSpec
    from pipeline.settings.model import StorageOptions


@dataclass(frozen=True)
class Lake:
    """One attached lake, as one session sees it: the connection, the catalog alias, the ops tables,
    the data folder. It speaks of no table: :meth:`tables` gives the image's, :meth:`table_named`
    one by its name. It owns no connection: the session that opened ``con`` closes it."""

    con: duckdb.DuckDBPyConnection
    name: str  # the catalog alias the lake is attached under (DUCKLAKE_NAME)
    ops_schema: str  # where the pipeline keeps its own tables (batches, quarantine, jobs)
    data_path: str  # the lake's data folder (DUCKLAKE_DATA_PATH, resolved)
    storage: StorageOptions  # how to reach it when it is object storage
    catalog: CatalogSpec  # where the lake's catalog is: its advisory locks are taken there

    @classmethod
    def of(cls, con: duckdb.DuckDBPyConnection, settings: ResolvedSettings) -> Lake:
        return cls(con, settings.lake_name, settings.ops_schema, settings.data_path, settings.storage,
                   settings.catalog)

    def table_named(self, name: str, id_column: str = ID, time_column: str = TIME) -> LakeTable:
        """The lake table ``main.<name>``, whose rows ``id_column`` names and ``time_column`` dates."""
        return LakeTable(self, name, id_column, time_column)

    def table_of(self, spec: TableSpec) -> LakeTable:
        """The lake table ``spec`` lands in, as this session sees it."""
        return self.table_named(spec.name, spec.id_column, spec.time_column)

    def tables(self, specs: Iterable[TableSpec]) -> dict[TableSpec, LakeTable]:
        """Each table of the image, as this session sees it."""
        return {spec: self.table_of(spec) for spec in specs}

    def lock_lake(self, job: str, *, timeout: float | None = None) -> AbstractContextManager[locks.Lease]:
        """The whole lake's lock for ``job`` (:func:`.locks.lake_lock`): what every table shares, such as
        the ops tables made once (two processes listing the tables in other orders take the same one)."""
        return locks.hold_named(self.catalog, locks.lake_lock(self.name, job), job, timeout=timeout)

    @contextlib.contextmanager
    def all_cores(self) -> Iterator[None]:
        """Statements that scan much (compaction's merge, --verify's whole-lake comparison) run on every
        core meanwhile; the lake's instance runs the pipeline's own statements on one
        (:mod:`pipeline.lake.extensions`)."""
        from pipeline.lake.extensions import OWN_SQL_THREADS

        self.execute(f"SET threads = {os.cpu_count() or 1}")
        try:
            yield
        finally:  # best effort: an instance a fatal error invalidated refuses every statement
            with contextlib.suppress(duckdb.Error):
                self.execute(f"SET threads = {OWN_SQL_THREADS}")

    def ops(self, table: str) -> str:
        """Fully qualified ops table, e.g. ``lake.ops.batches``."""
        return f"{self.name}.{self.ops_schema}.{table}"

    @property
    def batches_table(self) -> str:
        return self.ops("batches")

    @property
    def quarantine_table(self) -> str:
        return self.ops("quarantine")

    @cached_property
    def data_folder(self) -> Folder:
        """The data folder on its filesystem (zero-copy writes the lake's files there)."""
        return folder_of(self.data_path, self.storage)

    def execute(self, sql: str, params: Any = None) -> duckdb.DuckDBPyConnection:
        return self.con.execute(sql, params)

    def metadata(self) -> str:
        """DuckLake's own catalog tables' schema as the session attached it (``ducklake_table``,
        ``ducklake_data_file``… are read there by name: :mod:`pipeline.lake.connect` sets it)."""
        return str(one_row(self.execute("SELECT getvariable('lake_metadata')"))[0])


@dataclass(frozen=True)
class LakeTable:
    """One table of the lake, in a session (:meth:`Lake.tables`, :meth:`Lake.table_named`): it holds
    its :class:`Lake` (``table.lake``: the session it reads and writes through, the ops tables, the
    data folder) and says what is its own — its name, the columns that name and date a row
    (SOURCE_TABLES' own: :mod:`pipeline.columns`), its folder and its lock. What needs a table takes
    one of these; what is the lake's takes a :class:`Lake`: a table is not a lake."""

    lake: Lake  # the session it is read and written through
    name: str  # in the lake's main schema
    id_column: str = ID
    time_column: str = TIME

    def lock(self, job: str, *, timeout: float | None = None) -> AbstractContextManager[locks.Lease]:
        """This table's lock for ``job`` (:func:`.locks.table_lock`; the lake's: :meth:`Lake.lock_lake`)."""
        name = locks.table_lock(self.lake.name, self.name, job)
        return locks.hold_named(self.lake.catalog, name, job, timeout=timeout)

    @property
    def rows(self) -> str:
        """The table as the stages read it: its own columns, its id and time columns also as
        ``event_id`` and ``event_timestamp`` (:mod:`pipeline.columns`)."""
        return canonical_relation(self.events_table, self.id_column, self.time_column)

    def id_type(self) -> str | None:
        """The lake type of the table's id column (None: the table is not made yet)."""
        # literals: see identity.table_names
        row = self.lake.execute(
            f"SELECT data_type FROM duckdb_columns() WHERE database_name = {quote_literal(self.lake.name)} "
            f"AND schema_name = 'main' AND table_name = {quote_literal(self.name)} "
            f"AND column_name = {quote_literal(self.id_column)}").fetchone()
        return row[0] if row else None

    def id_kind(self) -> IdKind:
        """The table's key as its lake column holds it (a UUID for a table not made yet)."""
        return IdKind.of_lake(self.id_type(), self.id_column)

    def own(self, name: str) -> str:
        """The table's own name of the canonical column ``name``."""
        return own_name(name, self.id_column, self.time_column)

    @property
    def events_table(self) -> str:
        """Fully qualified, e.g. ``lake.main.events``."""
        return f"{self.lake.name}.main.{self.name}"

    @property
    def table_folder(self) -> Folder:
        return table_folder(self.lake.data_folder, self.name)


def table_folder(data: Folder, table: str) -> Folder:
    """Where DuckLake keeps a table's files in the data folder: ``<data path>/main/<table>``."""
    return data.child("main").child(table)
