"""Benchmark a first load of a history read in parts (BACKFILL_BATCH_ROWS), against DuckDB alone.

    uv run --dev python bench/bench_first_load.py --rows 10000000 [--part 2000000 5000000] [--reps 2]
    uv run --dev python bench/bench_first_load.py --rows 30000000 --part 5000000 --reps 1 --kill-at 0.5
    uv run --dev python bench/bench_first_load.py --rows 3000000 --part 500000 --reps 1 --status-every 1

The source table is made with ``generate_series`` (events over 30 days, written oldest first as an
application writes them, created_at the database's clock), so the history is there before the first
load, as when a team adopts the pipeline, and
vacuumed, as autovacuum leaves a table that has been there a while (its pages all-visible: the
walk that ends each part reads the time index alone; on a table never vacuumed it visits the
heap, about 0.7 s per 2M-row part instead of 0.15 s). Each rep
makes fresh databases, runs the reference (DuckDB's postgres extension, one INSERT … SELECT into a
fresh DuckLake, in a process of its own, first), then ``--run --json`` as a user runs it, in a
process of its own, once per part size (``--part``, each into a fresh lake, same history): its
load seconds excluding the engine's start, plan/extract/promote/check
seconds, rows read, parts, wall and CPU seconds of its process tree, peak RSS, and the ratio. With
``--kill-at F``, then a load into another fresh lake is SIGKILLed (its whole process group) once a
share F of the parts has committed, and run again: the rows read by both, against the table's.
Uses BENCH_PG_DSN (default the local Postgres on 127.0.0.1:5432).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, drop_databases, measured, postgres_cpu, print_table, run_reference, scratch_env

HISTORY_SQL = """
CREATE TABLE public.events (event_id uuid PRIMARY KEY, event_type text NOT NULL,
    event_timestamp timestamptz NOT NULL, details jsonb, created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO public.events (event_id, event_type, event_timestamp, details)
SELECT gen_random_uuid(), (ARRAY['page_view','click','purchase','signup'])[1 + i % 4],
       now() - interval '1 hour' - (({rows} - i) * (interval '30 days' / {rows})),
       jsonb_build_object('user_id', 'user_' || (i % 100000), 'n', i)
FROM generate_series(1, {rows}) i;
CREATE INDEX events_event_timestamp ON public.events (event_timestamp);
CREATE INDEX events_created_at ON public.events (created_at);
VACUUM (ANALYZE) public.events;
"""


def make_history(env: dict[str, str], rows: int) -> float:
    import psycopg

    t0 = time.monotonic()
    with psycopg.connect(env["SOURCE_PG_DSN"], autocommit=True) as conn:
        for statement in HISTORY_SQL.format(rows=rows).split(";"):
            if statement.strip():
                conn.execute(statement)
    return time.monotonic() - t0


def our_load(env: dict[str, str], engine: str) -> tuple[dict, float, float, int]:
    result, wall, cpu, rss = measured([sys.executable, str(ROOT / "events_pipeline.py"), "--run", "--json",
                                       "--engine", engine], env)
    return json.loads(result.stdout), wall, cpu, rss


def killed_load(env: dict[str, str], engine: str, parts: int, share: float) -> float:
    """Start a load, SIGKILL its process group once ``share`` of ``parts`` committed; its wall seconds."""
    at = max(1, math.ceil(parts * share))
    proc = subprocess.Popen([sys.executable, str(ROOT / "events_pipeline.py"), "--run", "--engine", engine],
                            env={**os.environ, **env}, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    t0 = time.monotonic()
    assert proc.stderr is not None
    for line in proc.stderr:
        if f"reading history: part {at} " in line:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return time.monotonic() - t0


def lake_rows(env: dict[str, str]) -> int:
    from pipeline.settings import load_settings
    from tests.helpers import lake_query

    return int(lake_query(load_settings(env), "SELECT count(*) FROM lake.main.events")[0][0])



def fresh_lake(env: dict[str, str], work: Path) -> tuple[dict[str, str], str]:
    """``env`` with a lake of its own (a new catalog database, data, staging and home under
    ``work``), reading the same source; and the catalog database's name."""
    from bench.common import BENCH_PG_DSN
    from pipeline.settings.pgdsn import PgDsn

    server = PgDsn.parse(BENCH_PG_DSN, "BENCH_PG_DSN")
    name = f"el_bench_cat_{work.name.replace('-', '_')}_{os.getpid()}"
    import psycopg

    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return {**env, "DUCKLAKE_CATALOG": server.with_dbname(name).conninfo(),
            "DUCKLAKE_DATA_PATH": str(work / "data") + "/", "STAGING_PATH": str(work / "staging"),
            "EVENT_LAKE_HOME": str(work / "home")}, name


def killed(env: dict[str, str], args: argparse.Namespace, part: int) -> list[tuple[str, str]]:
    """SIGKILL a load once ``args.kill_at`` of its parts committed, then run it again."""
    parts = math.ceil(args.rows / part)
    before = killed_load(env, args.engine, parts, args.kill_at)
    held = lake_rows(env)
    document, wall, _, rss = our_load(env, args.engine)
    # the killed load read what it committed and at most the part in flight
    read = held + part + document["rows_read"]
    return [(f"killed after {before:.1f}s with rows in the lake", f"{held:,}"),
            ("rerun: rows read / parts", f"{document['rows_read']:,} / {len(document['parts'])}"),
            ("rows read in all (at most) / table", f"{read:,} / {args.rows:,} = {read / args.rows:.2f}x"),
            ("rerun wall s, peak RSS MiB", f"{wall:.1f}, {rss / 2**20:,.0f}")]


@dataclass(frozen=True)
class StatusCall:
    """One ``--status --json`` made while the load ran: when it ended, how long it took, what it said
    of the history (None: nothing to read), and the lake's rows right after."""

    ended: float
    seconds: float
    loaded: int | None
    eta: float | None
    lake_rows: int


def poll_status(env: dict[str, str], every: float, stop: threading.Event, calls: list[StatusCall]) -> None:
    """``--status --json`` as another shell runs it, every ``every`` seconds until ``stop``."""
    while not stop.wait(every):
        t0 = time.monotonic()
        result = subprocess.run([sys.executable, str(ROOT / "events_pipeline.py"), "--status", "--json"],
                                env={**os.environ, **env}, cwd=ROOT, capture_output=True, text=True)
        took = time.monotonic() - t0
        try:
            history = json.loads(result.stdout).get("history")
            held = lake_rows(env)
        except Exception:  # noqa: BLE001  before the lake is made: nothing to compare yet
            continue
        calls.append(StatusCall(time.monotonic(), took, history and history["rows_loaded"],
                                history and history["eta_seconds"], held))


def status_rows(calls: list[StatusCall], ended: float) -> list[tuple[str, str]]:
    """What the status calls said while the load ran: their seconds, how far their rows lagged the
    lake's, and how far their ETAs were from the time the load then took."""
    if not calls:
        return [("--status calls while loading", "none completed")]
    seconds = sorted(c.seconds for c in calls)
    p95 = seconds[min(len(seconds) - 1, math.ceil(0.95 * len(seconds)) - 1)]
    behind = max((c.lake_rows - c.loaded for c in calls if c.loaded is not None), default=0)
    errors = [abs(c.eta - (ended - c.ended)) / (ended - c.ended) for c in calls
              if c.eta is not None and ended - c.ended > 1]
    return [("--status while loading: calls, s p50 / p95 / max",
             f"{len(calls)}, {seconds[len(seconds) // 2]:.2f} / {p95:.2f} / {seconds[-1]:.2f}"),
            ("--status rows loaded: most behind the lake's (rows)", f"{behind:,}"),
            ("--status ETA error vs the load's rest: first / worst",
             f"{errors[0]:.0%} / {max(errors):.0%}" if errors else "no ETA given")]


def measured_rows(env: dict[str, str], args: argparse.Namespace, reference: dict) -> list[tuple[str, str]]:
    """One first load, against the reference (and ``--status`` from another process meanwhile,
    with ``--status-every``)."""
    pg0 = postgres_cpu()
    stop, calls = threading.Event(), []
    poller = threading.Thread(target=poll_status, args=(env, args.status_every, stop, calls), daemon=True)
    if args.status_every:
        poller.start()
    try:
        document, wall, cpu, rss = our_load(env, args.engine)
    finally:
        stop.set()
    ended = time.monotonic()
    if args.status_every:
        poller.join()
    seconds = document["seconds"]
    ours = seconds["total"] - seconds.get("engine_start", 0.0)
    plan = seconds.get("plan", 0.0)
    return [
        ("reference: DuckDB alone s (own process, first): its INSERT / with its attach and "
         "CREATE TABLE", f"{reference['load s']:.2f} / {reference['load s'] + reference['setup s']:.2f}"),
        ("ours: total s excl. engine start (proof, attach and CREATE TABLE included)", f"{ours:.2f}"),
        ("ratio ours / reference (INSERT / with attach and CREATE TABLE)",
         f"{ours / reference['load s']:.2f} / {ours / (reference['load s'] + reference['setup s']):.2f}"),
        ("plan s (share of the load)", f"{plan:.2f} ({100 * plan / ours:.1f}%)"),
        ("extract / promote / check s",
         " / ".join(f"{seconds.get(step, 0):.2f}" for step in ("extract", "promote", "check"))),
        ("engine start s", f"{seconds.get('engine_start', 0.0):.2f}"),
        ("rows read / inserted / parts", f"{document['rows_read']:,} / {document['rows_inserted']:,} / "
                                         f"{len(document.get('parts', []))}"),
        ("rows/s excl. engine start", f"{document['rows_inserted'] / ours:,.0f}"),
        ("wall s, CPU s (tree / Postgres)", f"{wall:.1f}, {cpu:.1f} / {postgres_cpu() - pg0:.1f}"),
        ("peak RSS MiB (tree)", f"{rss / 2**20:,.0f}"),
        *(status_rows(calls, ended) if args.status_every else [])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--part", type=int, nargs="+", default=[2_000_000], help="BACKFILL_BATCH_ROWS (each)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--engine", choices=("spark", "dlt"), default="spark")
    parser.add_argument("--kill-at", type=float, default=None,
                        help="SIGKILL once this share of parts committed")
    parser.add_argument("--status-every", type=float, default=0.0,
                        help="run --status --json from another process every this many seconds while "
                             "the load runs: its seconds, rows behind the lake's, ETA error")
    args = parser.parse_args()
    for rep in range(1, args.reps + 1):
        with tempfile.TemporaryDirectory(prefix="el-first-") as tmp:
            env, dbs = scratch_env(Path(tmp))
            try:
                made = make_history(env, args.rows)
                reference = run_reference({**env, "DUCKLAKE_NAME": "lake_ref",
                                           "DUCKLAKE_DATA_PATH": str(Path(tmp) / "data_ref") + "/"})
                for part in args.part:
                    rows = [("history made with generate_series s", f"{made:.1f}")]
                    for how in ("measured", "killed") if args.kill_at is not None else ("measured",):
                        lake_env, catalog = fresh_lake(env, Path(tmp) / f"{how}-{part}")
                        dbs.append(catalog)
                        lake_env["BACKFILL_BATCH_ROWS"] = str(part)
                        rows += (killed(lake_env, args, part) if how == "killed"
                                 else measured_rows(lake_env, args, reference))
                        assert lake_rows(lake_env) == args.rows
                    print_table(f"First load of {args.rows:,} rows in parts of {part:,} ({args.engine}), "
                                f"rep {rep}", rows)
            finally:
                drop_databases(dbs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
