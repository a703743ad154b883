"""Freshness: how long after an event is written does the lake show it, under a steady stream?

    uv run --dev python bench/bench_freshness.py --seconds 300 --load-every 30s --rate 1000

Starts the generator writing about --rate events/s into a fresh source and, beside it, the
real scheduler (``events_pipeline.py --schedule``, Spark, loading every --load-every). After
--seconds both are stopped. For every event in the lake: the seconds from its ``created_at``
(the source transaction that wrote it) to the time of the lake snapshot that made it visible
(DuckLake's ``table_changes`` names that snapshot per row). Prints p50/p95/max, the number of
loads, and the scheduler's CPU share (its process and the Spark JVM, of all cores).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import drop_databases, print_table, scratch_env  # noqa: E402
from pipeline.settings import load_settings  # noqa: E402
from pipeline.settings.resolve import resolve  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def cpu_seconds(process: psutil.Process) -> float:
    """CPU time of ``process`` and its living children (the JVM) so far."""
    total = sum(process.cpu_times()[:2])
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    return total


def latencies(settings) -> list[float]:
    from pipeline.lake import connect as lake

    con = lake.connect(resolve(settings), read_only=True)
    try:
        latest = con.execute(f"SELECT max(snapshot_id) FROM {settings.lake_name}.snapshots()").fetchone()[0]
        rows = con.execute(f"""
            SELECT epoch(s.snapshot_time) - epoch(c.created_at)
            FROM {settings.lake_name}.table_changes('{settings.lake_table}', 0, {latest}) c
            JOIN {settings.lake_name}.snapshots() s USING (snapshot_id)
            WHERE c.change_type = 'insert'""").fetchall()
        return sorted(r[0] for r in rows)
    finally:
        con.close()


def percentile(values: list[float], share: float) -> float:
    return values[min(len(values) - 1, int(share * len(values)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=300)
    parser.add_argument("--load-every", default="30s")
    parser.add_argument("--rate", type=int, default=1000, help="Events per second, approximately.")
    parser.add_argument("--promotion", choices=("zero-copy", "copy"), default="zero-copy")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="el-fresh-") as tmp:
        env, dbs = scratch_env(Path(tmp), promotion=args.promotion)
        full_env = {**os.environ, **env}
        settings = load_settings(env)
        try:
            # half-second loops of rate/2 events: about --rate events per second
            generator = subprocess.Popen(
                [sys.executable, str(ROOT / "insert_event_data_loop.py"), "--continuous", "--rows",
                 str(args.rate // 2), "--delay", "0.5", "--workers", "1", "--quiet"],
                env=full_env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(2)  # the table exists before the first load
            log = Path(tmp) / "scheduler.log"
            with open(log, "w") as sink:
                scheduler = subprocess.Popen(
                    [sys.executable, str(ROOT / "events_pipeline.py"), "--schedule", "--run-now",
                     "--load-every", args.load_every, "--expire-every", "1d", "--compact-every", "1d",
                     "--reconcile-every", "1d"],
                    env=full_env, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
                watched = psutil.Process(scheduler.pid)
                t0, cpu0 = time.monotonic(), cpu_seconds(watched)
                cpu = cpu0
                while time.monotonic() - t0 < args.seconds and scheduler.poll() is None:
                    time.sleep(1)
                    with contextlib.suppress(psutil.Error):
                        cpu = cpu_seconds(watched)
                wall = time.monotonic() - t0
                generator.send_signal(signal.SIGTERM)
                generator.wait(60)
                scheduler.send_signal(signal.SIGTERM)
                scheduler.wait(120)
            loads = log.read_text().count("job load success")
            values = latencies(settings)
            print_table(f"Freshness over {wall:.0f} s: ~{args.rate} events/s, loads every {args.load_every} "
                        f"({args.promotion})", [
                            ("events visible in the lake", f"{len(values):,}"),
                            ("loads that succeeded", f"{loads}"),
                            ("created -> visible p50 s", f"{percentile(values, 0.50):.1f}"),
                            ("created -> visible p95 s", f"{percentile(values, 0.95):.1f}"),
                            ("created -> visible max s", f"{values[-1]:.1f}"),
                            ("scheduler CPU share of all cores (incl. JVM start)",
                             f"{(cpu - cpu0) / wall / psutil.cpu_count():.1%}"),
                        ])
        finally:
            drop_databases(dbs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
