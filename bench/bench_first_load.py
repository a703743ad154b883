"""Benchmark a first load of a history read in parts (BACKFILL_BATCH_ROWS), against DuckDB alone.

    uv run --dev python bench/bench_first_load.py --rows 10000000 [--part 1000000] [--reps 2]
    uv run --dev python bench/bench_first_load.py --rows 10000000 --kill-at 0.5

The source table is made with ``generate_series`` (events over 30 days, created_at the database's
clock), so the history is there before the first load, as when a team adopts the pipeline. Each rep
makes fresh databases, runs the reference (DuckDB's postgres extension, one INSERT … SELECT into a
fresh DuckLake, in a process of its own, first), then ``--run --json`` as a user runs it, in a
process of its own: its load seconds excluding the engine's start, plan/extract/promote/check
seconds, rows read, parts, wall and CPU seconds of its process tree, peak RSS, and the ratio. With
``--kill-at F``, the load is SIGKILLed (its whole process group) once a share F of the parts has
committed, then run again: the rows read by both, against the table's.
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, drop_databases, measured, postgres_cpu, print_table, run_reference, scratch_env

HISTORY_SQL = """
CREATE TABLE public.events (event_id uuid PRIMARY KEY, event_type text NOT NULL,
    event_timestamp timestamptz NOT NULL, details jsonb, created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO public.events (event_id, event_type, event_timestamp, details)
SELECT gen_random_uuid(), (ARRAY['page_view','click','purchase','signup'])[1 + i % 4],
       now() - interval '1 hour' - (i * (interval '30 days' / {rows})),
       jsonb_build_object('user_id', 'user_' || (i % 100000), 'n', i)
FROM generate_series(1, {rows}) i;
CREATE INDEX events_event_timestamp ON public.events (event_timestamp);
CREATE INDEX events_created_at ON public.events (created_at);
ANALYZE public.events;
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--part", type=int, default=1_000_000, help="BACKFILL_BATCH_ROWS")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--engine", choices=("spark", "dlt"), default="spark")
    parser.add_argument("--kill-at", type=float, default=None,
                        help="SIGKILL once this share of parts committed")
    args = parser.parse_args()
    for rep in range(1, args.reps + 1):
        with tempfile.TemporaryDirectory(prefix="el-first-") as tmp:
            env, dbs = scratch_env(Path(tmp))
            env = {**env, "BACKFILL_BATCH_ROWS": str(args.part)}
            try:
                made = make_history(env, args.rows)
                reference = run_reference({**env, "DUCKLAKE_NAME": "lake_ref",
                                           "DUCKLAKE_DATA_PATH": str(Path(tmp) / "data_ref") + "/"})
                rows: list[tuple[str, str]] = [("history made with generate_series s", f"{made:.1f}")]
                if args.kill_at is not None:
                    parts = math.ceil(args.rows / args.part)
                    before = killed_load(env, args.engine, parts, args.kill_at)
                    held = lake_rows(env)
                    document, wall, cpu, rss = our_load(env, args.engine)
                    # the killed load read what it committed and at most the part in flight
                    read = held + args.part + document["rows_read"]
                    rows += [(f"killed after {before:.1f}s with rows in the lake", f"{held:,}"),
                             ("rerun: rows read / parts",
                              f"{document['rows_read']:,} / {len(document['parts'])}"),
                             ("rows read in all (at most) / table", f"{read:,} / {args.rows:,} = "
                                                                   f"{read / args.rows:.2f}x"),
                             ("rerun wall s", f"{wall:.1f}")]
                else:
                    pg0 = postgres_cpu()
                    document, wall, cpu, rss = our_load(env, args.engine)
                    seconds = document["seconds"]
                    ours = seconds["total"] - seconds.get("engine_start", 0.0)
                    plan = seconds.get("plan", 0.0)
                    rows += [
                        ("reference: DuckDB alone s (own process, first)", f"{reference['load s']:.2f}"),
                        ("ours: total s excl. engine start (proof included)", f"{ours:.2f}"),
                        ("ratio ours / reference", f"{ours / reference['load s']:.2f}"),
                        ("plan s (share of the load)", f"{plan:.2f} ({100 * plan / ours:.1f}%)"),
                        ("extract / promote / check s", f"{seconds.get('extract', 0):.2f} / "
                                                        f"{seconds.get('promote', 0):.2f} / "
                                                        f"{seconds.get('check', 0):.2f}"),
                        ("engine start s", f"{seconds.get('engine_start', 0.0):.2f}"),
                        ("rows read / inserted / parts",
                         f"{document['rows_read']:,} / {document['rows_inserted']:,} / "
                         f"{len(document.get('parts', []))}"),
                        ("rows/s excl. engine start", f"{document['rows_inserted'] / ours:,.0f}"),
                        ("wall s, CPU s (tree / Postgres)",
                         f"{wall:.1f}, {cpu:.1f} / {postgres_cpu() - pg0:.1f}"),
                        ("peak RSS MiB (tree)", f"{rss / 2**20:,.0f}")]
                assert lake_rows(env) == args.rows
                print_table(f"First load of {args.rows:,} rows in parts of {args.part:,} ({args.engine}), "
                            f"rep {rep}", rows)
            finally:
                drop_databases(dbs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
