"""Benchmark one full load: generator, Spark extract, DuckLake promote, and the reference.

    uv run --dev python bench/bench_pipeline.py --events 1000000 [--promotion copy] [--no-warm]

Prints generator events/s; extract, promote and total seconds; peak memory (this process
plus the Spark JVM); and the same load done by DuckDB's postgres extension straight into
a DuckLake (the single-machine reference), with our/reference ratio excluding JVM start.
Uses fresh databases on BENCH_PG_DSN (default the local Postgres on 127.0.0.1:5432).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import PeakMemory, drop_databases, print_table, scratch_settings  # noqa: E402
from pipeline.extract.spark_session import build_session  # noqa: E402
from pipeline.lake import connect as lake  # noqa: E402
from pipeline.lake import schema, verify  # noqa: E402
from pipeline.ops.run import run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def reference_load(settings, name: str = "lake_ref") -> float:
    """DuckDB postgres extension -> DuckLake in one INSERT … SELECT (no staging, no Spark)."""
    ref = replace(settings, lake_name=name, data_path=settings.data_path.rstrip("/") + f"_{name}/")
    con = lake.connect(ref)
    try:
        schema.ensure_tables(con, ref)
        verify.attach_source(con, ref)
        t0 = time.monotonic()
        con.execute(f"""INSERT INTO {ref.events_table}
            SELECT event_id, event_type, event_timestamp, details::JSON, created_at
            FROM src.public.events""")
        return time.monotonic() - t0
    finally:
        con.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--engine", choices=("spark", "dlt"), default="spark")
    parser.add_argument("--promotion", choices=("zero-copy", "copy"), default="zero-copy")
    parser.add_argument("--no-warm", action="store_true", help="Skip the second load in the warm session.")
    parser.add_argument("--keep", action="store_true", help="Keep the scratch databases.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="el-bench-") as tmp:
        settings, dbs = scratch_settings(Path(tmp), promotion=args.promotion)
        try:
            gen = subprocess.run(
                [sys.executable, str(ROOT / "insert_event_data_loop.py"), "--rows", str(args.events),
                 "--seed", "1", "--quiet"],
                env={**_env(settings)}, cwd=ROOT, capture_output=True, text=True, check=True)
            rate = float(re.search(r"\(([\d,]+) events/s\)", gen.stdout).group(1).replace(",", ""))
            with PeakMemory() as memory:
                t0 = time.monotonic()
                spark = build_session(settings) if args.engine == "spark" else None
                jvm_start = time.monotonic() - t0
                report = run(settings, engine=args.engine, spark=spark)
            assert report.rows_inserted == args.events, report.summary()
            extract = report.seconds.get("extract", 0.0)
            promote = report.seconds.get("promote", 0.0)
            ours = report.seconds["total"]
            registered = sum(p.files_registered for p in report.promotions)
            # nothing new since, look-back 0: the fixed cost of a run (every event here lies within
            # the default 15 min look-back, which a normal rerun would read again)
            noop = run(replace(settings, lookback=timedelta(0)), engine=args.engine, spark=spark)
            assert noop.rows_inserted == 0, noop.summary()
            # nothing new, default look-back: every event here is within it, so all are re-read
            rerun = run(settings, engine=args.engine, spark=spark)
            assert rerun.rows_inserted == 0, rerun.summary()
            reference = reference_load(settings)
            warm = None
            if not args.no_warm:
                # a second load of the same size in the same (now warm) Spark session: what a
                # long-lived scheduler process sees once the JVM has compiled the hot paths
                subprocess.run([sys.executable, str(ROOT / "insert_event_data_loop.py"), "--rows",
                                str(args.events), "--seed", "2", "--quiet"],
                               env={**_env(settings)}, cwd=ROOT, capture_output=True, check=True)
                # look-back 0: only the new rows, i.e. the steady per-batch cost of a warm session
                warm = run(replace(settings, lookback=timedelta(0)), engine=args.engine, spark=spark)
                assert warm.rows_inserted == args.events, warm.summary()
            comparison = verify.compare(settings)
            warm_rows = [] if warm is None else [
                ("warm 2nd load: extract s", f"{warm.seconds.get('extract', 0):.2f}"),
                ("warm 2nd load: promote s", f"{warm.seconds.get('promote', 0):.2f}"),
                ("warm 2nd load: total s", f"{warm.seconds['total']:.2f}"),
                ("ratio ours/reference (warm)", f"{warm.seconds['total'] / reference:.2f}")]
            print_table(f"Full load of {args.events:,} events ({args.engine}, {args.promotion} promotion)", [
                ("generator events/s", f"{rate:,.0f}"),
                ("JVM/Spark start s", f"{jvm_start:.2f}"),
                ("plan s (watermark, window count)", f"{report.seconds.get('plan', 0):.2f}"),
                ("extract s", f"{extract:.2f}"),
                ("promote s", f"{promote:.2f}"),
                ("total s (excl. JVM start)", f"{ours:.2f}"),
                ("events/s (excl. JVM start)", f"{args.events / ours:,.0f}"),
                ("peak memory MiB (py + JVM)", f"{memory.peak / 2**20:,.0f}"),
                ("reference: duckdb postgres ext s", f"{reference:.2f}"),
                ("ratio ours/reference (cold JVM)", f"{ours / reference:.2f}"),
                ("files registered (zero-copy)", f"{registered}"),
                (f"no-op rerun s, look-back 0 ({noop.rows_in_window:,} rows read)",
                 f"{noop.seconds['total']:.2f}"),
                (f"rerun s, look-back {settings.lookback} ({rerun.rows_in_window:,} rows re-read)",
                 f"{rerun.seconds['total']:.2f}"),
                *warm_rows,
                ("lake == source", "yes" if comparison.equal else "NO"),
            ])
            if spark is not None:
                spark.stop()
        finally:
            if not args.keep:
                drop_databases(dbs)
    return 0


def _env(settings) -> dict[str, str]:
    import os

    return {**os.environ, "SOURCE_PG_DSN": settings.source_dsn.conninfo(),
            "EVENT_LAKE_HOME": str(settings.home)}


if __name__ == "__main__":
    sys.exit(main())
