"""One Spark task of the arrow reader: read one time slice of the window from Postgres and write
it as Parquet straight into its destination.

This module runs on the executors (Spark unpickles :class:`SliceJob` there and imports this
module by name), so it needs only pyarrow, ADBC's Postgres driver and this package, which is
what "the executors need the project's Python environment" means. Rows never pass through the
JVM: each task opens its own ADBC connection, imports the planner's exported snapshot (so every
slice sees the same rows the planner counted), reads its slice with Postgres's binary COPY into
Arrow and writes the Parquet itself; Spark only learns (slice, rows).

Three destinations:
- a staging batch folder (copy promotion): one ``part-<slice>.parquet`` in the staging schema;
- a zero-copy batch's ``_incoming/<batch>/`` folder: each row marked ``_dest=lake`` (in its UTC
  day folder, in the lake table's exact types: UUID/JSON or text), ``_dest=stage`` (a NULL id or
  time: copy promotion validates it) or ``_dest=seen`` (an id the lake already holds: counted);
  :mod:`.lake_files` settles them, as it settles the JDBC reader's output;
- none: the rows are yielded back to the driver (``STAGING_WRITER=driver``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.columns import EVENT_COLUMNS
from pipeline.extract import read_ids
from pipeline.extract.arrow_writer import ParquetFile, staging_schema, to_staging_schema
from pipeline.extract.task_reports import ReportTo
from pipeline.storage.folder import Folder

if TYPE_CHECKING:
    import duckdb

# what each task tells Spark (Spark DDL): its rows, and the ids it read dated in the window's range
# when it sums them (pipeline.extract.read_ids; null: it did not)
_RESULT = pa.schema([(name, pa.int64()) for name in ("slice", "rows", "ids", "id_high", "id_low")])
RESULT_SCHEMA = ", ".join(f"{name} long" for name in _RESULT.names)  # the same, as Spark DDL
DEST = "_dest"  # the folder a zero-copy batch's rows are split on: "lake", "stage" or "seen"
SEEN = "seen"  # rows whose id the lake already holds: counted as duplicates, then deleted


@dataclass(frozen=True)
class SliceSource:
    """How a task reaches the source: the libpq string (with the password: it travels inside the
    pickled task, never in a plan, a Spark property or a command line), the planner's snapshot
    and session time zone."""

    conninfo: str = field(repr=False)
    snapshot_id: str | None
    timezone: str
    tag: str = ""  # the sessions' application_name: the driver cancels what a cancelled job left reading


    @contextlib.contextmanager
    def cursor(self) -> Iterator[Any]:
        import adbc_driver_postgresql.dbapi as adbc

        from pipeline.source.snapshot import import_statements
        from pipeline.sqltext import quote_literal

        with adbc.connect(self.conninfo, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("BEGIN")
            tag = [f"SET LOCAL application_name = {quote_literal(self.tag)}"] if self.tag else []
            for statement in [*(import_statements(self.snapshot_id) if self.snapshot_id else []),
                              f"SET LOCAL TIME ZONE {quote_literal(self.timezone)}", *tag]:
                cur.execute(statement)
            try:
                yield cur
            finally:
                with contextlib.suppress(Exception):  # a lost connection must not mask the real error
                    cur.execute("ROLLBACK")

    def cancel_reads(self) -> int:
        """Cancel the source queries still running under this source's tag (a Spark job cancelled
        by a stop or LOAD_TIMEOUT stops its tasks, but the queries they started in Postgres ran
        on, one more per retry); how many were. Best effort: the source may be what failed."""
        if not self.tag:
            return 0
        import psycopg

        try:
            with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
                return len(conn.execute("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE "
                                        "application_name = %s AND pid <> pg_backend_pid()",
                                        (self.tag,)).fetchall())
        except psycopg.Error:
            return 0

    def batches(self, query: str) -> Iterator[pa.RecordBatch]:
        """The rows of ``query``, streamed in Arrow record batches."""
        with self.cursor() as cur:
            cur.execute(query)
            yield from cur.fetch_record_batch()


@dataclass(frozen=True)
class LakeOutput:
    """A zero-copy batch's incoming folder, the ids the lake holds in the window (a Parquet file
    in ``incoming``'s parent, or None), whether the lake's columns are typed (UUID/JSON) and the
    payload keys it keeps as columns (each day's file then holds them, sorted by the first)."""

    incoming: Folder
    lake_ids: Folder | None
    lake_ids_name: str | None
    typed: bool
    payload_keys: tuple[str, ...] = ()  # the table's typed payload keys (pipeline.lake.payload_fields)


@dataclass(frozen=True)
class SliceJob:
    """What every task of one extraction shares; ``queries[i]`` reads slice ``i``. Called by
    ``mapInArrow`` with batches of slice numbers, it yields ``(slice, rows)`` per slice (or the
    rows themselves when ``output`` is None)."""

    source: SliceSource
    queries: tuple[str, ...]
    output: Folder | LakeOutput | None
    extra_columns: tuple[str, ...] = ()
    report_to: ReportTo | None = None  # the driver's progress line, when one is drawn
    # sum the ids of the rows read dated at or before this (the window's upper): the part's proof
    sum_ids_to: datetime | None = None

    def __call__(self, slices: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in slices:
            for index in batch.column(0).to_pylist():
                yield from self._run(int(index))

    def _run(self, index: int) -> Iterator[pa.RecordBatch]:
        rows = self.source.batches(self.queries[index])
        if self.report_to is not None:
            rows = self.report_to.counting(rows, index)
        schema = staging_schema(self.extra_columns)
        if self.output is None:
            for item in rows:
                yield from to_staging_schema(item, schema).to_batches()
            return
        tally = read_ids.Tally(self.sum_ids_to) if self.sum_ids_to is not None else None
        if tally is not None:
            rows = tally.through(rows)
        if isinstance(self.output, LakeOutput):
            count = _split_for_lake(rows, self.output, index)
        else:
            count = _write_staging(rows, self.output, f"part-{index:05d}.parquet", schema)
        ids = tally.total if tally is not None else None
        yield pa.RecordBatch.from_pydict({"slice": [index], "rows": [count],
                                          **read_ids.as_columns(ids)}, schema=_RESULT)


def _write_staging(rows: Iterator[pa.RecordBatch], folder: Folder, name: str, schema: pa.Schema) -> int:
    """Write ``rows`` as one staging file; returns the rows written."""
    with ParquetFile(folder, name, schema) as file:
        for item in rows:
            file.write(to_staging_schema(item, schema))
    return file.rows


def _split_for_lake(rows: Iterator[pa.RecordBatch], output: LakeOutput, index: int) -> int:
    """Mark each row for the lake, for staging or as seen, and write each group where
    :mod:`.lake_files` expects it; returns the rows read."""
    known = _lake_ids(output)
    files: dict[str, ParquetFile] = {}
    # with typed payload keys, each day's rows are held until the slice is read, then written sorted
    # by the first key: a user's rows then sit in a few row groups, which a query on it reads alone
    held: dict[str, list[pa.Table]] = {}
    total = 0
    try:
        for item in rows:
            total += item.num_rows
            table = pa.Table.from_batches([item])
            ids, times = table.column("event_id"), table.column("event_timestamp")
            if known is None and ids.null_count == 0 and times.null_count == 0:
                lake, stage, seen = None, None, None  # the usual case: every row is the lake's
            else:
                seen = (pc.fill_null(pc.is_in(_key(ids), value_set=known), False) if known is not None
                        else pa.repeat(False, len(ids)))
                complete = pc.and_(pc.is_valid(ids), pc.is_valid(times))
                lake = pc.and_(complete, pc.invert(seen))
                stage = pc.and_(pc.invert(complete), pc.invert(seen))
            if seen is not None and pc.any(seen).as_py():
                seen_ids = table.filter(seen).select(["event_id"])
                _append(files, output.incoming, f"{DEST}={SEEN}", index, seen_ids)
            if stage is not None and pc.any(stage).as_py():
                _append(files, output.incoming, f"{DEST}=stage", index, _as_staged(table.filter(stage)))
            if lake is None or pc.any(lake).as_py():
                kept = table if lake is None else table.filter(lake)
                for folder, day_rows in _by_day(kept.select(list(EVENT_COLUMNS))):
                    if output.payload_keys:
                        held.setdefault(folder, []).append(day_rows)
                    else:
                        _append(files, output.incoming, f"{DEST}=lake/{folder}", index, day_rows)
        for folder, tables in held.items():
            _append(files, output.incoming, f"{DEST}=lake/{folder}", index,
                    payload_columns(pa.concat_tables(tables), output.payload_keys))
    except BaseException:
        for file in files.values():
            file.abort()  # a failed slice leaves no file (see ParquetFile); a retry writes them anew
        raise
    for file in files.values():
        file.close()
    return total


def payload_columns(table: pa.Table, keys: tuple[str, ...]) -> pa.Table:
    """``table`` with a column per typed payload key, each value ``details->>'key'`` as DuckDB
    computes it (the seed's own operator: a query reads the same from the column as from the
    JSON), sorted by the first key's value, then by time."""
    from pipeline.lake.payload_fields import column_of, value_sql

    details = table.column("details").combine_chunks()
    text = details.storage if isinstance(details, pa.ExtensionArray) else details
    con = _payload_reader()
    con.register("payload", pa.table({"details": text}))
    try:
        values = con.execute("SELECT " + ", ".join(f"{value_sql(key)} AS k{i}" for i, key in enumerate(keys))
                             + " FROM payload").to_arrow_table()
    finally:
        con.unregister("payload")
    for i, key in enumerate(keys):
        table = table.append_column(pa.field(column_of(key), pa.string()),
                                    values.column(f"k{i}").cast(pa.string()))
    order = pc.sort_indices(table, null_placement="at_end",
                            sort_keys=[(column_of(keys[0]), "ascending"), ("event_timestamp", "ascending")])
    return table.take(order)


_READERS = threading.local()


def _payload_reader() -> duckdb.DuckDBPyConnection:
    """This thread's DuckDB for the payload keys, made once (a worker runs its tasks one after the
    other): one made per day of a slice cost a fifth of the keys' work. One thread: the other
    tasks run in worker processes of their own."""
    if getattr(_READERS, "con", None) is None:
        import duckdb

        _READERS.con = duckdb.connect(config={"threads": "1"})
    return _READERS.con


def _lake_ids(output: LakeOutput) -> pa.Array | None:
    if output.lake_ids is None or output.lake_ids_name is None:
        return None
    with output.lake_ids.open_input(output.lake_ids_name) as handle:
        return _key(pq.read_table(handle, columns=["event_id"]).column(0).combine_chunks())


def _key(ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Ids in a form both sides share: a UUID's 16 bytes, or the text."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    return ids.storage if isinstance(ids, pa.ExtensionArray) else ids


def _as_staged(table: pa.Table) -> pa.Table:
    """Rows for copy promotion in the staging schema (ids and JSON as text). Only rows without
    an id or a time come here, so converting their ids one by one costs nothing."""
    columns = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if isinstance(column.type, pa.UuidType):
            column = pa.array([None if v is None else str(v) for v in column.to_pylist()], pa.string())
        elif isinstance(column, pa.ExtensionArray):
            column = column.storage
        columns[name] = column
    return to_staging_schema(pa.table(columns), staging_schema(
        [n for n in table.column_names if n not in EVENT_COLUMNS]))


def _by_day(table: pa.Table) -> Iterator[tuple[str, pa.Table]]:
    """``(year=Y/month=M/day=D, rows)`` per UTC day of ``event_timestamp`` (DuckLake's folders)."""
    ts = table.column("event_timestamp")  # UTC instants: their naive form is the UTC wall time
    # by day number, not by each row's folder name (building that string per row cost about 0.5 s
    # of CPU per million rows: a tenth of a first load's extraction)
    days = pc.cast(pc.cast(ts, pa.timestamp(ts.type.unit)), pa.date32())
    unique = pc.unique(days)
    for day in unique.to_pylist():
        folder = f"year={day.year}/month={day.month}/day={day.day}"  # month=1, not 01
        yield folder, table if len(unique) == 1 else table.filter(pc.equal(days, pa.scalar(day, pa.date32())))


def _append(files: dict[str, ParquetFile], incoming: Folder, folder: str, index: int,
            table: pa.Table) -> None:
    if folder not in files:
        files[folder] = ParquetFile(incoming.child(folder), f"part-{index:05d}.parquet", table.schema)
    files[folder].write(table)


def executor_facts(tasks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Run on an executor: its host, Python and whether the reader's packages import there
    (``doctor`` asks every executor, not only the driver). Starting it warms the worker too."""
    for _ in tasks:  # consume the input: a worker whose input was left unread is not reused
        pass
    problems = []
    # duckdb: each day's typed payload keys are read with it (imported here, the first slices do not)
    for module in ("pyarrow", "adbc_driver_postgresql.dbapi", "pipeline.extract.slice_task", "duckdb"):
        try:
            __import__(module)
        except Exception as exc:  # noqa: BLE001  any import failure is the finding
            problems.append(f"{module}: {type(exc).__name__}: {exc}")
    yield pa.RecordBatch.from_pydict({"host": [socket.gethostname()], "pid": [os.getpid()],
                                      "python": [sys.executable], "problems": ["; ".join(problems)]})


FACTS_SCHEMA = "host string, pid long, python string, problems string"


@dataclass(frozen=True)
class SourceProbe:
    """Run on an executor: can it read the source as a slice would? (``doctor``)"""

    source: SliceSource

    def __call__(self, tasks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in tasks:  # consumed, so the worker can be reused
            pass
        rows = sum(batch.num_rows for batch in self.source.batches("SELECT 1 AS one"))
        yield pa.RecordBatch.from_pydict({"host": [socket.gethostname()], "rows": [rows]})


PROBE_SCHEMA = "host string, rows long"
