"""Shared bench helpers: scratch databases, a peak-memory sampler, table printing."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import psycopg

from pipeline.settings import Settings, load_settings
from pipeline.settings.model import Promotion
from pipeline.settings.pgdsn import PgDsn

ROOT = Path(__file__).resolve().parent.parent
BENCH_PG_DSN = os.environ.get("BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


# the source table the benches make (as the generator does), its rows then made by generate_series
EVENTS_TABLE_SQL = """
CREATE TABLE public.events (event_id uuid PRIMARY KEY, event_type text NOT NULL,
    event_timestamp timestamptz NOT NULL, details jsonb, created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX events_event_timestamp ON public.events (event_timestamp);
CREATE INDEX events_created_at ON public.events (created_at)
"""


def fill_in_parallel(dsn: str, statement: Callable[[int, int], str], first: int, last: int,
                     writers: int = 2) -> None:
    """Run ``statement(lo, hi)`` over ``first..last`` split in ``writers`` ranges, concurrently, one
    connection each: a 100M-row history made by one backend takes one core about 40 minutes."""
    size = -(-(last - first + 1) // writers)
    ranges = [(lo, min(lo + size - 1, last)) for lo in range(first, last + 1, size)]
    failures: list[BaseException] = []

    def write(lo: int, hi: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(statement(lo, hi))
        except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
            failures.append(exc)

    threads = [threading.Thread(target=write, args=bounds) for bounds in ranges]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def scratch_env(work: Path, tag: str | None = None,
                promotion: str = "zero-copy") -> tuple[dict[str, str], list[str]]:
    """Pipeline settings (as environment) on fresh source and catalog databases of BENCH_PG_DSN,
    and the databases' names (for :func:`drop_databases`)."""
    server = PgDsn.parse(BENCH_PG_DSN, "BENCH_PG_DSN")
    tag = tag or secrets.token_hex(3)
    names = [f"el_bench_src_{tag}", f"el_bench_cat_{tag}"]
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    env = {"SOURCE_PG_DSN": server.with_dbname(names[0]).conninfo(),
           "DUCKLAKE_CATALOG": server.with_dbname(names[1]).conninfo(),
           "DUCKLAKE_DATA_PATH": str(work / "data") + "/", "STAGING_PATH": str(work / "staging"),
           "EVENT_LAKE_HOME": str(work / "home"), "PROMOTION": promotion}
    return env, names


def scratch_settings(work: Path, tag: str | None = None,
                     promotion: str = "zero-copy") -> tuple[Settings, list[str]]:
    """Settings on fresh source and catalog databases of BENCH_PG_DSN."""
    env, names = scratch_env(work, tag, promotion)
    return load_settings(env), names


@contextlib.contextmanager
def scratch_lake(prefix: str, promotion: str = "zero-copy"):
    """A fresh, resolved lake on scratch databases: yields (settings, the open lake)."""
    import tempfile

    from pipeline import embedded
    from pipeline.lake import connect as lake
    from pipeline.lake import schema
    from pipeline.lake.session import Lake

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        settings, dbs = scratch_settings(Path(tmp), promotion=promotion)
        try:
            settings = embedded.resolved(settings)
            con = lake.connect(settings)
            try:
                [opened] = Lake.of(con, settings).tables(settings.tables).values()  # the one table
                schema.ensure_tables(opened, schema.column_types(settings.promotion, settings.spark.reader))
                yield settings, opened
            finally:
                con.close()
        finally:
            drop_databases(dbs)


def drop_databases(names: list[str]) -> None:
    server = PgDsn.parse(BENCH_PG_DSN, "BENCH_PG_DSN")
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class PeakMemory:
    """Samples the RSS of this process and its children (the Spark JVM) every 0.2 s."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = me.memory_info().rss
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):  # a child may exit while we look
                    total += child.memory_info().rss
            self.peak = max(self.peak, total)
            time.sleep(0.2)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def print_table(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    print(f"\n{title}\n" + "-" * (width + 20))
    for key, value in rows:
        print(f"{key:<{width}}  {value:>16}")


def stage_synthetic_batch(opened, settings: Settings, rows: int, now, *, overlap: int = 0,
                          spread_seconds: int = 3600):
    """Stage ``rows`` events in the ``spread_seconds`` before ``now``, ``overlap`` of them
    copied from the lake (as the look-back re-reads them); returns the StagedBatch. In a
    zero-copy lake the batch is shaped as Spark leaves it: the new rows as lake files in the
    day folders, the overlap staged for copy promotion."""
    from pipeline import staging
    from pipeline.extract import lake_files
    from pipeline.promote import zero_copy
    from pipeline.source.window import Window

    con = opened.lake.con
    batch_id = staging.new_batch_id()
    path = staging.batch_dir(staging.table_dir(settings, settings.tables[0]), batch_id)
    path.make(exist_ok=False)
    types = "['user_login','api_request','payment_processed','error_occurred','feature_usage']"
    seen = f"""SELECT event_id::VARCHAR AS event_id, event_type, event_timestamp, details::VARCHAR AS details,
               created_at FROM {settings.lake_table(settings.tables[0])}
               WHERE event_timestamp > $now::TIMESTAMPTZ - INTERVAL 1 HOUR LIMIT {overlap}"""
    new = f"""SELECT uuid()::VARCHAR AS event_id, {types}[1 + i % 5] AS event_type,
               $now::TIMESTAMPTZ - to_seconds(CAST(i % {spread_seconds} AS BIGINT)) AS event_timestamp,
               '{{"user_id": "user_' || (i % 997) || '", "amount": ' || (i % 500) || '.25, "status": "'
                 || CASE WHEN i % 7 = 0 THEN 'failed' ELSE 'success' END || '", "severity": "'
                 || CASE WHEN i % 11 = 0 THEN 'critical' ELSE 'error' END || '"}}' AS details,
               $now::TIMESTAMPTZ AS created_at FROM range({rows - overlap}) t(i)"""
    if settings.promotion is not Promotion.ZERO_COPY:
        con.execute(f"COPY (({seen}) UNION ALL ({new})) TO '{path.uri('part-00000.parquet')}' "
                    "(FORMAT parquet)", {"now": now})
        files, lake, snapshot, rows_seen = ["part-00000.parquet"], [], None, 0
    else:
        snapshot = con.execute(f"SELECT max(snapshot_id) FROM {settings.lake_name}.snapshots()").fetchone()[0]
        target = zero_copy.LakeTarget(zero_copy.table_folder(settings, settings.tables[0]), None, 0, snapshot)
        incoming = lake_files.incoming_dir(target, batch_id)
        incoming.child("_dest=seen").make(exist_ok=True)  # the overlap: counted by Spark, not staged
        con.execute(f"COPY ({seen}) TO '{incoming.child('_dest=seen').uri('part-0.parquet')}' "
                    "(FORMAT parquet)", {"now": now})
        # the lake's own types (UUID, JSON: the arrow reader's), as DuckLake registers only those
        con.execute(f"""COPY (SELECT * REPLACE (event_id::UUID AS event_id, details::JSON AS details),
                                     year(event_timestamp) AS year, month(event_timestamp) AS month,
                                     day(event_timestamp) AS day FROM ({new}))
                        TO '{incoming.child('_dest=lake').uri()}'
                        (FORMAT parquet, PARTITION_BY (year, month, day))""",
                    {"now": now})
        settled = lake_files.settle(target, batch_id, path)
        lake, rows_seen = settled.lake_files, settled.rows_seen
        files = staging.parquet_files(path)
    return staging.seal(path, batch_id=batch_id, table=settings.tables[0].name, engine="bench",
                        window=Window(None, now), row_count=rows, files=files, lake_files=lake or None,
                        lake_snapshot=snapshot, rows_seen=rows_seen)


# The single-machine reference: DuckDB's postgres extension, one INSERT … SELECT into a fresh
# UUID/JSON DuckLake, run in a process of its own (sharing a process with a JVM makes it ~2x slow).
REFERENCE_SCRIPT = """
import sys, time
from pipeline.lake import connect as lake, schema
from pipeline.lake.session import Lake
from pipeline.settings import load_settings
from pipeline import embedded
settings = embedded.resolved(load_settings())
t_setup = time.monotonic()
con = lake.connect(settings, source=True)
[events] = Lake.of(con, settings).tables(settings.tables).values()
schema.ensure_tables(events, schema.column_types(settings.promotion, settings.spark.reader))
t0 = time.monotonic()
# the source's columns named: the lake table has its own after them (known since)
con.execute(f"INSERT INTO {settings.lake_table(settings.tables[0])} "
            "(event_id, event_type, event_timestamp, details, created_at) SELECT event_id, event_type, "
            "event_timestamp, details::JSON, created_at FROM src.public.events")
print(t0 - t_setup, time.monotonic() - t0)
"""


def measured(args: list[str], env: dict[str, str]
             ) -> tuple[subprocess.CompletedProcess[str], float, float, int]:
    """Run ``args``; returns (result, wall s, CPU s of its process tree, peak RSS of the tree).
    The tree (the JVM, Spark's Python workers) is sampled every 0.2 s: a grandchild's CPU time
    reaches no rusage unless every parent waits for it."""
    cpu: dict[int, float] = {}
    peak = 0
    proc = subprocess.Popen(args, env={**os.environ, **env}, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            rss = 0
            try:
                tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            except psutil.Error:
                tree = []
            for p in tree:
                with contextlib.suppress(psutil.Error):
                    times = p.cpu_times()
                    cpu[p.pid] = times.user + times.system + times.children_user + times.children_system
                    rss += p.memory_info().rss
            peak = max(peak, rss)
            done.wait(0.2)

    sampler = threading.Thread(target=sample)
    t0 = time.monotonic()
    sampler.start()
    stdout, stderr = proc.communicate()
    wall = time.monotonic() - t0
    done.set()
    sampler.join()
    result = subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args[1:3])} failed:\n{stdout[-2000:]}\n{stderr[-3000:]}")
    return result, wall, sum(cpu.values()), peak


def verified(row: dict[str, float], lake_env: dict[str, str], label: str) -> dict[str, float]:
    """``row`` with ``equal`` (1.0 when ``--verify`` finds the lake equal to its source), printed
    to stderr as it comes."""
    check = subprocess.run([sys.executable, str(ROOT / "events_pipeline.py"), "--verify"],
                           env={**os.environ, **lake_env}, cwd=ROOT, capture_output=True)
    row["equal"] = float(check.returncode == 0)
    print(f"{label}: {json.dumps({k: round(v, 2) for k, v in row.items()})}", file=sys.stderr)
    return row


def run_reference(env: dict[str, str]) -> dict[str, float]:
    """The reference load on the lake ``env`` names, in its own process: its load seconds (the
    INSERT), its setup seconds (the lake's attach and CREATE TABLE, which a pipeline's total
    counts), the process's wall and CPU seconds, its peak RSS and Postgres's CPU seconds meanwhile."""
    pg = postgres_cpu()
    result, wall, cpu, rss = measured([sys.executable, "-c", REFERENCE_SCRIPT], env)
    setup, load = map(float, result.stdout.strip().splitlines()[-1].split())
    return {"load s": load, "setup s": setup, "wall s": wall, "cpu s": cpu,
            "postgres cpu s": postgres_cpu() - pg, "rss MiB": rss / 2**20}


def postgres_cpu() -> float:
    """CPU seconds the local Postgres server has used so far: its postmaster with every backend,
    live (their own times) or gone (reaped, so counted in the postmaster's children times).
    Differences of two readings are a run's Postgres cost on an otherwise idle server."""
    total = 0.0
    for proc in psutil.process_iter(["name", "ppid"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["name"] != "postgres" or psutil.Process(proc.info["ppid"]).name() == "postgres":
                continue
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
            for child in proc.children():
                with contextlib.suppress(psutil.Error):
                    ct = child.cpu_times()
                    total += ct.user + ct.system
    return total
