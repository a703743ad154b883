"""Benchmark the Spark readers against DuckDB alone: one fresh load of the same source, each in
its own process (a reference sharing a process with a JVM runs about 2x slow), interleaved.

    uv run --dev python bench/bench_readers.py --events 1000000 --reps 2
    uv run --dev python bench/bench_readers.py --events 5000000 --reps 1 --readers arrow

For each reader (``SPARK_READER=arrow|jdbc``) a fresh lake (own catalog database, data and
staging folders) takes ``events_pipeline.py --run --json`` in a new process: the report's
plan, extract and promote seconds (the JVM's start is reported apart, and excluded from the
ratio as in the issue's measure); CPU seconds of the process and its children (the JVM and
the Python workers) and of the Postgres server meanwhile; peak RSS. The reference is
DuckDB's postgres extension running ``INSERT … SELECT`` into a fresh UUID/JSON DuckLake, in its
own process. Every lake is compared with the source at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    BENCH_PG_DSN,
    ROOT,
    drop_databases,
    measured,
    postgres_cpu,
    print_table,
    run_reference,
    scratch_env,
    verified,
)
from pipeline.settings.pgdsn import PgDsn


def fresh_lake(source_env: dict[str, str], work: Path) -> tuple[dict[str, str], str]:
    """``source_env`` with a new catalog database and new data/staging folders."""
    import psycopg

    server = PgDsn.parse(BENCH_PG_DSN, "BENCH_PG_DSN")
    name = f"el_bench_cat_{secrets.token_hex(3)}"
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    folder = work / name
    return {**source_env, "DUCKLAKE_CATALOG": server.with_dbname(name).conninfo(),
            "DUCKLAKE_DATA_PATH": str(folder / "data") + "/", "STAGING_PATH": str(folder / "staging"),
            "EVENT_LAKE_HOME": str(folder / "home")}, name


def settle_source(dsn: str) -> None:
    """After the bulk load: vacuum, analyze and checkpoint the source, so the first contender
    does not pay for hint bits, statistics and the checkpoint the others then find done."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE public.events")
        conn.execute("CHECKPOINT")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--readers", default="arrow,jdbc", help="comma-separated: arrow, jdbc")
    parser.add_argument("--promotion", choices=("zero-copy", "copy"), default="zero-copy")
    args = parser.parse_args()
    readers = [r for r in args.readers.split(",") if r]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in ["duckdb alone", *readers]}
    with tempfile.TemporaryDirectory(prefix="el-readers-") as tmp:
        work = Path(tmp)
        env, dbs = scratch_env(work / "source", promotion=args.promotion)
        env = {"SOURCE_PG_DSN": env["SOURCE_PG_DSN"], "PROMOTION": args.promotion, "LOOKBACK": "15m"}
        try:
            generator = [sys.executable, str(ROOT / "insert_event_data_loop.py"), "--rows", str(args.events)]
            subprocess.run([*generator, "--seed", "1", "--quiet"], cwd=ROOT, capture_output=True, check=True,
                           env={**os.environ, **env, "EVENT_LAKE_HOME": tmp})
            settle_source(env["SOURCE_PG_DSN"])
            for rep in range(args.reps):
                for name in results:  # interleaved: a busy moment hits every contender alike
                    lake_env, catalog = fresh_lake(env, work)
                    dbs.append(catalog)
                    if name == "duckdb alone":
                        row = run_reference(lake_env)
                    else:
                        pg = postgres_cpu()
                        result, wall, cpu, rss = measured(
                            [sys.executable, str(ROOT / "events_pipeline.py"), "--run", "--json", "--quiet"],
                            {**lake_env, "SPARK_READER": name})
                        report = json.loads(result.stdout)
                        s = report["seconds"]
                        # the identity check after promotion is part of the load (its source side is in plan)
                        load = sum(s.get(step, 0) for step in ("plan", "extract", "promote", "check"))
                        assert report["rows_inserted"] == args.events, report
                        row = {"load s": load, "extract s": s.get("extract", 0), "plan s": s.get("plan", 0),
                               "check s": s.get("check", 0),
                               "spark start s": s.get("engine_start", 0), "wall s": wall, "cpu s": cpu,
                               "postgres cpu s": postgres_cpu() - pg, "rss MiB": rss / 2**20}
                    results[name].append(verified(row, lake_env, f"rep {rep + 1} {name}"))
        finally:
            drop_databases(dbs)
    reference = statistics.median(r["load s"] for r in results["duckdb alone"])
    rows = []
    for name, runs in results.items():
        load = statistics.median(r["load s"] for r in runs)
        cpu = statistics.median(r["cpu s"] for r in runs)
        start = statistics.median(r.get("spark start s", 0) for r in runs)
        pg_cpu = statistics.median(r["postgres cpu s"] for r in runs)
        wall = statistics.median(r["wall s"] for r in runs)
        rows.append((f"{name}: load s (min/median), process wall s, cpu s (process tree / Postgres), "
                     "spark start s",
                     f"{min(r['load s'] for r in runs):.2f} / {load:.2f}, {wall:.1f}, "
                     f"{cpu:.1f} / {pg_cpu:.1f}, {start:.1f}"))
        rows.append((f"{name}: events/s, ratio to duckdb alone, peak RSS MiB (tree), lake == source",
                     f"{args.events / load:,.0f}, {load / reference:.2f}x, "
                     f"{max(r['rss MiB'] for r in runs):,.0f}, "
                     f"{'yes' if all(r['equal'] for r in runs) else 'NO'}"))
    print_table(f"Fresh load of {args.events:,} events, {args.promotion}, {args.reps} rep(s), own processes",
                rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
