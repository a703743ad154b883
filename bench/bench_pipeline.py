"""Benchmark one full load: generator, Spark extract, DuckLake promote, and the reference.

    uv run --dev python bench/bench_pipeline.py --events 1000000 [--promotion copy] [--no-warm]

Prints generator events/s; extract, promote and total seconds; CPU seconds of this process
tree (the Spark JVM and its Python workers) and of Postgres; peak memory; and the same load
done by DuckDB's postgres extension straight into a DuckLake (the single-machine reference),
run first in a process of its own, with our/reference ratio excluding JVM start; then a
no-op rerun, a look-back rerun and a warm second load in the same session.
Uses fresh databases on BENCH_PG_DSN (default the local Postgres on 127.0.0.1:5432).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    PeakMemory,
    drop_databases,
    postgres_cpu,
    print_table,
    run_reference,
    scratch_env,
)
from pipeline import embedded
from pipeline.extract.engines import make_extractor
from pipeline.load import verify
from pipeline.settings import load_settings
from tests.helpers import run

ROOT = Path(__file__).resolve().parent.parent


def tree_cpu() -> float:
    """CPU seconds of this process and its children so far (the Spark JVM, its Python workers)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:4])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--engine", choices=("spark", "dlt"), default="spark")
    parser.add_argument("--promotion", choices=("zero-copy", "copy"), default="zero-copy")
    parser.add_argument("--no-warm", action="store_true", help="Skip the second load in the warm session.")
    parser.add_argument("--keep", action="store_true", help="Keep the scratch databases.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="el-bench-") as tmp:
        env, dbs = scratch_env(Path(tmp), promotion=args.promotion)
        settings = load_settings(env)
        try:
            gen = subprocess.run(
                [sys.executable, str(ROOT / "insert_event_data_loop.py"), "--rows", str(args.events),
                 "--seed", "1", "--quiet"],
                env={**_env(settings)}, cwd=ROOT, capture_output=True, text=True, check=True)
            rate = float(re.search(r"\(([\d,]+) events/s\)", gen.stdout).group(1).replace(",", ""))
            # the reference first, in its own process, on its own lake in the same catalog
            reference_run = run_reference({**env, "DUCKLAKE_NAME": "lake_ref",
                                           "DUCKLAKE_DATA_PATH": str(Path(tmp) / "data_ref") + "/"})
            reference = reference_run["load s"]
            cpu0, pg0 = tree_cpu(), postgres_cpu()
            with PeakMemory() as memory:
                t0 = time.monotonic()
                # as a --run starts its engine: the JVM, then (arrow reader) a Python worker per core
                spark = (make_extractor("spark", embedded.resolved(settings)).spark
                         if args.engine == "spark" else None)
                jvm_start = time.monotonic() - t0
                report = run(settings, engine=args.engine, spark=spark)
            cpu, pg_cpu = tree_cpu() - cpu0, postgres_cpu() - pg0
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
            warm = None
            if not args.no_warm:
                # a second load of the same size in the same (now warm) Spark session: what a
                # long-lived scheduler process sees once the JVM has compiled the hot paths
                subprocess.run([sys.executable, str(ROOT / "insert_event_data_loop.py"), "--rows",
                                str(args.events), "--seed", "2", "--quiet"],
                               env={**_env(settings)}, cwd=ROOT, capture_output=True, check=True)
                # look-back 0: only the new rows, i.e. the steady per-batch cost of a warm session
                warm_cpu0, warm_pg0 = tree_cpu(), postgres_cpu()
                warm = run(replace(settings, lookback=timedelta(0)), engine=args.engine, spark=spark)
                warm_cpu, warm_pg = tree_cpu() - warm_cpu0, postgres_cpu() - warm_pg0
                assert warm.rows_inserted == args.events, warm.summary()
            comparison = verify.compare(settings)
            warm_rows = [] if warm is None else [
                ("warm 2nd load: extract s", f"{warm.seconds.get('extract', 0):.2f}"),
                ("warm 2nd load: promote s", f"{warm.seconds.get('promote', 0):.2f}"),
                ("warm 2nd load: total s", f"{warm.seconds['total']:.2f}"),
                ("warm 2nd load: CPU s (process + JVM + workers / Postgres)",
                 f"{warm_cpu:.1f} / {warm_pg:.1f}"),
                ("ratio ours/reference (warm)", f"{warm.seconds['total'] / reference:.2f}")]
            print_table(f"Full load of {args.events:,} events ({args.engine}, {args.promotion} promotion)", [
                ("generator events/s", f"{rate:,.0f}"),
                ("Spark start s (JVM + Python workers)", f"{jvm_start:.2f}"),
                ("plan s (watermark, window count)", f"{report.seconds.get('plan', 0):.2f}"),
                ("extract s", f"{extract:.2f}"),
                ("promote s", f"{promote:.2f}"),
                ("total s (excl. JVM start)", f"{ours:.2f}"),
                ("events/s (excl. JVM start)", f"{args.events / ours:,.0f}"),
                ("peak memory MiB (py + JVM)", f"{memory.peak / 2**20:,.0f}"),
                ("CPU s, cold (process + JVM + workers / Postgres)", f"{cpu:.1f} / {pg_cpu:.1f}"),
                ("reference: duckdb postgres ext s (own process, run first)", f"{reference:.2f}"),
                ("reference: wall s, CPU s (process / Postgres)",
                 f"{reference_run['wall s']:.1f}, {reference_run['cpu s']:.1f} / "
                 f"{reference_run['postgres cpu s']:.1f}"),
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
