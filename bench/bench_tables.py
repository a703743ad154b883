"""Benchmark SOURCE_TABLES: one run over three tables against three one-table runs and against
DuckDB alone reading the three tables in one transaction, each in its own processes, interleaved.

    uv run --dev python bench/bench_tables.py --events 1000000 --reps 2

Three source tables of ``--events`` rows each. Contenders, each on a fresh lake:

* ``one run, 3 tables``: ``events_pipeline.py --run --json`` with SOURCE_TABLES — one snapshot,
  one JVM start, one lake commit;
* ``3 one-table runs``: ``--run`` three times, SOURCE_TABLE each (three JVM starts, three commits
  at three instants: what three pipelines did before);
* ``duckdb alone``: DuckDB's postgres extension, ``INSERT … SELECT`` of each table into the lake
  in one transaction, in its own process.

Load seconds exclude the JVM start (reported apart), as in bench_readers; wall seconds include
everything. Every lake is compared with the source at the end (``--verify``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_readers import fresh_lake
from bench.common import ROOT, drop_databases, measured, print_table, scratch_env, verified

TABLES = ("public.orders", "public.order_events", "public.clicks")

# DuckDB alone: the three tables into a fresh UUID/JSON DuckLake in one transaction, own process
REFERENCE_SCRIPT = """
import sys, time
from pipeline.lake import connect as lake, schema
from pipeline.lake.session import Lake
from pipeline.settings import load_settings
from pipeline import embedded
settings = embedded.resolved(load_settings())
con = lake.connect(settings, source=True)
lakes = [Lake.of(con, settings).table_named(t.name, t.id_column, t.time_column) for t in settings.tables]
for one in lakes:
    schema.ensure_tables(one, schema.column_types(settings.promotion, settings.spark.reader))
t0 = time.monotonic()
con.execute("BEGIN")
for one, table in zip(lakes, settings.tables):
    con.execute(f"INSERT INTO {one.events_table} "
                "(event_id, event_type, event_timestamp, details, created_at) "
                "SELECT event_id, event_type, event_timestamp, details::JSON, created_at "
                f"FROM src.{table.qualified}")
con.execute("COMMIT")
print(time.monotonic() - t0)
"""


def pipeline_run(env: dict[str, str]) -> dict[str, float]:
    result, wall, cpu, rss = measured([sys.executable, str(ROOT / "events_pipeline.py"), "--run", "--json",
                                       "--quiet"], env)
    seconds = json.loads(result.stdout)["seconds"]
    return {"load s": sum(seconds.get(step, 0) for step in ("plan", "extract", "promote", "check")),
            "spark start s": seconds.get("engine_start", 0), "wall s": wall, "cpu s": cpu,
            "rss MiB": rss / 2**20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="rows per table")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    names = ["duckdb alone", "one run, 3 tables", "3 one-table runs"]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="el-tables-") as tmp:
        work = Path(tmp)
        scratch, dbs = scratch_env(work / "source")
        env = {"SOURCE_PG_DSN": scratch["SOURCE_PG_DSN"], "LOOKBACK": "15m"}
        try:
            generator = [sys.executable, str(ROOT / "insert_event_data_loop.py"), "--rows", str(args.events)]
            for seed, table in enumerate(TABLES, start=1):
                subprocess.run([*generator, "--table", table, "--seed", str(seed), "--quiet"], cwd=ROOT,
                               check=True, capture_output=True,
                               env={**os.environ, **env, "EVENT_LAKE_HOME": tmp})
            every = {**env, "SOURCE_TABLES": ",".join(TABLES)}
            for rep in range(args.reps):
                for name in names:  # interleaved: a busy moment hits every contender alike
                    lake_env, catalog = fresh_lake(every, work)
                    dbs.append(catalog)
                    if name == "duckdb alone":
                        result, wall, cpu, rss = measured([sys.executable, "-c", REFERENCE_SCRIPT], lake_env)
                        row = {"load s": float(result.stdout.strip().splitlines()[-1]), "spark start s": 0.0,
                               "wall s": wall, "cpu s": cpu, "rss MiB": rss / 2**20}
                    elif name == "one run, 3 tables":
                        row = pipeline_run(lake_env)
                    else:
                        one = {k: v for k, v in lake_env.items() if k != "SOURCE_TABLES"}
                        runs = [pipeline_run({**one, "SOURCE_TABLE": table}) for table in TABLES]
                        row = {key: sum(r[key] for r in runs) for key in runs[0]}
                        row["rss MiB"] = max(r["rss MiB"] for r in runs)
                    results[name].append(verified(row, lake_env, f"rep {rep + 1} {name}"))
        finally:
            drop_databases(dbs)
    reference = statistics.median(r["load s"] for r in results["duckdb alone"])
    reference_wall = statistics.median(r["wall s"] for r in results["duckdb alone"])
    rows = []
    for name, runs in results.items():
        load = statistics.median(r["load s"] for r in runs)
        wall = statistics.median(r["wall s"] for r in runs)
        rows.append((f"{name}: load s (min/median), wall s, spark start s, cpu s",
                     f"{min(r['load s'] for r in runs):.2f} / {load:.2f}, {wall:.1f}, "
                     f"{statistics.median(r['spark start s'] for r in runs):.1f}, "
                     f"{statistics.median(r['cpu s'] for r in runs):.1f}"))
        rows.append((f"{name}: rows/s, load / duckdb alone, wall / duckdb alone, lake == source",
                     f"{3 * args.events / load:,.0f}, {load / reference:.2f}x, {wall / reference_wall:.2f}x, "
                     f"{'yes' if all(r['equal'] for r in runs) else 'NO'}"))
    print_table(f"Fresh load of 3 tables x {args.events:,} rows, {args.reps} rep(s), own processes", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
