"""Freshness and steady-state cost: how long after an event is written does the lake show it, and
how many rows does each load read for the rows it inserts, under a steady stream?

    uv run --dev python bench/bench_freshness.py --seconds 300 --rate 1000 --rate 10000
    uv run --dev python bench/bench_freshness.py --mode schedule --every 30s --arrival none

Starts the generator writing about --rate events/s into a fresh source and, beside it, the real
pipeline: ``events_pipeline.py --follow --every E`` (default) or ``--schedule --load-every E``.
After --seconds the generator stops, the pipeline gets one more load (a follower by itself; a
scheduler from one ``--run`` after its SIGTERM), then the lake is compared. Measured:
- created -> visible: for every event, the seconds from its ``created_at`` (the source
  transaction that wrote it) to the time of the lake snapshot that made it visible (DuckLake's
  ``table_changes`` names that snapshot per row), for events written after the first load (the
  first load pays Spark's start, once per process);
- rows read per load / rows inserted, from ``ops.batches`` (after the first load);
- CPU share of all cores: the pipeline's process tree (JVM, Spark's Python workers) and Postgres;
- live data files, data files on disk and snapshots at the end; lake == source (count, ids,
  checksum: the pipeline's own --verify).
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

from bench.common import drop_databases, postgres_cpu, print_table, scratch_env
from pipeline import embedded
from pipeline.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent


def cpu_seconds(process: psutil.Process) -> float:
    """CPU time of ``process`` and its living children (the JVM, Python workers) so far."""
    total = sum(process.cpu_times()[:2])
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    return total


def lake_facts(settings) -> dict[str, object]:
    """Latencies of the steady phase, rows read/inserted after the first load, files, snapshots."""
    from pipeline.lake.connect import lake_session

    lake, table = settings.lake_name, settings.tables[0].name
    with lake_session(embedded.resolved(settings), read_only=True) as con:
        latest = con.execute(f"SELECT max(snapshot_id) FROM {lake}.snapshots()").fetchone()[0]
        first_batch = con.execute(f"SELECT min(promoted_at) FROM {settings.batches_table}").fetchone()[0]
        # a writer with its own clock says its skew in the row (the generator's --clock-skew): the
        # write's time on the database's clock is created_at minus it; a row it dated ahead of the
        # database's clock is due (loadable) only from its event_timestamp on
        rows = con.execute(f"""
            SELECT epoch(s.snapshot_time) - (epoch(c.created_at) - skew),
                   epoch(s.snapshot_time) - greatest(epoch(c.created_at) - skew, epoch(c.event_timestamp))
            FROM (SELECT *, coalesce(TRY_CAST(details->>'clock_skew_s' AS DOUBLE), 0) AS skew
                  FROM {lake}.table_changes('{table}', 0, {latest})) c
            JOIN {lake}.snapshots() s USING (snapshot_id)
            WHERE c.change_type = 'insert' AND c.created_at > $first""", {"first": first_batch}).fetchall()
        latencies = sorted(r[0] for r in rows)
        due = sorted(r[1] for r in rows)
        by_writer = con.execute(f"""
            SELECT skew, count(*), quantile_cont(epoch(s.snapshot_time) - (epoch(c.created_at) - skew), 0.5),
                   quantile_cont(epoch(s.snapshot_time) - (epoch(c.created_at) - skew), 0.95)
            FROM (SELECT *, coalesce(TRY_CAST(details->>'clock_skew_s' AS DOUBLE), 0) AS skew
                  FROM {lake}.table_changes('{table}', 0, {latest})) c
            JOIN {lake}.snapshots() s USING (snapshot_id)
            WHERE c.change_type = 'insert' AND c.created_at > $first GROUP BY skew ORDER BY skew""",
                                {"first": first_batch}).fetchall()
        read, inserted, loads = con.execute(
            f"SELECT sum(rows_staged), sum(rows_inserted), count(*) FROM {settings.batches_table} "
            "WHERE promoted_at > $first", {"first": first_batch}).fetchone()
        live = con.execute("SELECT count(*) FROM ducklake_list_files(?, ?)", [lake, table]).fetchone()[0]
        snapshots = con.execute(f"SELECT count(*) FROM {lake}.snapshots()").fetchone()[0]
    on_disk = sum(1 for _ in Path(settings.data_path).rglob("*.parquet"))
    return {"latencies": latencies, "due": due, "by_writer": by_writer, "read": read or 0,
            "inserted": inserted or 0, "loads": loads, "live files": live, "files on disk": on_disk,
            "snapshots": snapshots}


def percentile(values: list[float], share: float) -> float:
    return values[min(len(values) - 1, int(share * len(values)))] if values else float("nan")


def one_rate(args: argparse.Namespace, rate: int) -> list[tuple[str, str]]:
    from pipeline.load.verify import compare

    with tempfile.TemporaryDirectory(prefix="el-fresh-") as tmp:
        env, dbs = scratch_env(Path(tmp), promotion=args.promotion)
        env.update(SOURCE_ARRIVAL_COLUMN=args.arrival, METRICS_PORT="0", FOLLOW_EVERY=args.every)
        full_env = {**os.environ, **env}
        settings = load_settings(env)
        try:
            # loops of rate/4 events every quarter second: about `rate` events per second, split
            # between writers whose clocks stamp created_at (--writer-skew), or one the database stamps
            skews: list[str | None] = list(args.writer_skew.split(",")) if args.writer_skew else [None]
            generators = [subprocess.Popen(
                [sys.executable, str(ROOT / "insert_event_data_loop.py"), "--continuous", "--rows",
                 str(max(1, rate // 4 // len(skews))), "--delay", "0.25", "--workers", "1", "--quiet",
                 *(["--clock-skew", skew] if skew is not None else [])],
                env=full_env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for skew in skews]
            time.sleep(2)  # the table exists before the first load
            command = (["--follow", "--every", args.every] if args.mode == "follow" else
                       ["--schedule", "--run-now", "--load-every", args.every])
            log = Path(tmp) / "pipeline.log"
            with open(log, "w") as sink:
                pipeline = subprocess.Popen(
                    [sys.executable, str(ROOT / "events_pipeline.py"), *command, "--expire-every", "1d",
                     "--reconcile-every", "1d"],
                    env=full_env, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
                watched = psutil.Process(pipeline.pid)
                t0, cpu0, pg0 = time.monotonic(), cpu_seconds(watched), postgres_cpu()
                cpu = cpu0
                while time.monotonic() - t0 < args.seconds and pipeline.poll() is None:
                    time.sleep(1)
                    with contextlib.suppress(psutil.Error):
                        cpu = cpu_seconds(watched)
                wall, pg = time.monotonic() - t0, postgres_cpu() - pg0
                for generator in generators:
                    generator.send_signal(signal.SIGTERM)
                for generator in generators:
                    generator.wait(60)
                # rows a writer dated ahead of the database's clock are loaded once due
                ahead = max([0.0, *(float(s) for s in skews if s is not None)])
                every = settings.intervals.follow.total_seconds()
                time.sleep(ahead + (3 * every if args.mode == "follow" else 1))
                pipeline.send_signal(signal.SIGTERM)
                code = pipeline.wait(120)
            if args.mode == "schedule":  # rows written since its last load: one --run catches up
                subprocess.run([sys.executable, str(ROOT / "events_pipeline.py"), "--run"], env=full_env,
                               cwd=ROOT, check=True, capture_output=True)
            facts = lake_facts(settings)
            same = compare(embedded.resolved(settings))
            values = facts["latencies"]
            cores = psutil.cpu_count()
            return [
                ("events/s written (actual)", f"{same.source.rows / wall:,.0f}"),
                ("loads after the first", f"{facts['loads']}"),
                ("rows read per load / rows inserted",
                 f"{facts['read'] / facts['inserted']:.2f}" if facts["inserted"] else "n/a"),
                ("created -> visible p50 s", f"{percentile(values, 0.50):.1f}"),
                ("created -> visible p95 s", f"{percentile(values, 0.95):.1f}"),
                ("created -> visible max s", f"{values[-1]:.1f}" if values else "n/a"),
                ("due -> visible p95 s (rows dated ahead wait until due)",
                 f"{percentile(facts['due'], 0.95):.1f}"),
                *((f"  writer clock {skew:+.0f} s: rows, created -> visible p50 / p95 s",
                   f"{rows:,}, {p50:.1f} / {p95:.1f}") for skew, rows, p50, p95 in facts["by_writer"]),
                ("pipeline CPU, share of all cores (incl. JVM start)", f"{(cpu - cpu0) / wall / cores:.1%}"),
                ("Postgres CPU, share of all cores (incl. the writes)", f"{pg / wall / cores:.1%}"),
                ("live data files / data files on disk", f"{facts['live files']} / {facts['files on disk']}"),
                ("snapshots", f"{facts['snapshots']}"),
                ("lake == source (count, ids, checksum)", "yes" if same.equal else f"NO: {same.describe()}"),
                ("pipeline exit status after SIGTERM", f"{code}"),
            ]
        finally:
            drop_databases(dbs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=300)
    parser.add_argument("--mode", choices=("follow", "schedule"), default="follow")
    parser.add_argument("--every", default="2s", help="--follow's --every, or --schedule's --load-every.")
    parser.add_argument("--rate", type=int, action="append", help="Events per second (repeatable; 1000).")
    parser.add_argument("--arrival", default="created_at", help="SOURCE_ARRIVAL_COLUMN (none: look-back).")
    parser.add_argument("--writer-skew", help="Writers stamping created_at from their own clocks, seconds "
                        "off the database's, comma-separated (e.g. -10,0,10: three writers sharing --rate).")
    parser.add_argument("--promotion", choices=("zero-copy", "copy"), default="zero-copy")
    args = parser.parse_args()
    for rate in args.rate or [1000]:
        rows = one_rate(args, rate)
        print_table(f"{args.mode} every {args.every}, ~{rate:,} events/s for {args.seconds} s "
                    f"(SOURCE_ARRIVAL_COLUMN={args.arrival}, {args.promotion})", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
