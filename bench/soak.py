"""Soak: the generator writing ~1,000 events/s beside a scheduler (loads every 30 s, expiry every
minute, compaction every 2 minutes) for 10 minutes; then lake == source, and how the scheduler's
memory, open files and the lake's data file count moved over time.

    uv run --dev python bench/soak.py                    # 10 minutes, as in the README
    uv run --dev python bench/soak.py --minutes 3 --engine dlt
    uv run --dev python bench/soak.py --minutes 15 --follow   # --follow --every 2s instead

The scheduler runs as a user runs it (``--schedule`` in its own process) on scratch databases
of BENCH_PG_DSN; it is sampled every 30 s (RSS and open files of it and its children, e.g. the
Spark JVM; data files in the lake). At the end the generator stops, one ``--run`` catches up
and the lake is compared with the source (count, distinct ids, checksum).
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

from bench.common import drop_databases, print_table, scratch_env
from pipeline import embedded
from pipeline.errors import LakeNotCreated
from pipeline.load.verify import compare
from pipeline.settings import load_settings
from tests.helpers import lake_query

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_SQL = ("SELECT (SELECT count(*) FROM ducklake_list_files('lake', 'events')), "
              "(SELECT count(*) FROM lake.main.events)")


def usage(pid: int) -> tuple[int, int]:
    """(RSS bytes, open files) of a process and its children."""
    rss, files = 0, 0
    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(pid)
        for p in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                rss += p.memory_info().rss
                files += p.num_fds()
    return rss, files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=int, default=1000, help="events per second written")
    parser.add_argument("--engine", default="spark", choices=("spark", "dlt"))
    parser.add_argument("--follow", action="store_true", help="--follow --every 2s instead of --schedule")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        scratch, dbs = scratch_env(Path(tmp))
        try:
            run(args, {**os.environ, **scratch}, load_settings(scratch))
        finally:
            drop_databases(dbs)


def run(args: argparse.Namespace, env: dict[str, str], settings) -> None:
    py = sys.executable
    # create the table first so the scheduler's first load finds it
    subprocess.run([py, str(ROOT / "insert_event_data_loop.py"), "--rows", "1000", "--quiet"], env=env,
                   cwd=ROOT, check=True, capture_output=True)
    generator = subprocess.Popen([py, str(ROOT / "insert_event_data_loop.py"), "--continuous", "--rows",
                                  str(args.rate), "--delay", "1", "--quiet"], env=env, cwd=ROOT,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = open(Path(env["EVENT_LAKE_HOME"]).parent / "scheduler.log", "w")  # noqa: SIM115
    mode = (["--follow", "--every", "2s"] if args.follow
            else ["--schedule", "--run-now", "--load-every", "30s"])
    scheduler = subprocess.Popen([py, str(ROOT / "events_pipeline.py"), *mode, "--metrics-port", "0",
                                  "--engine", args.engine, "--expire-every", "1m",
                                  "--compact-every", "2m", "--retention", "1m"], env=env, cwd=ROOT,
                                 stdout=log, stderr=subprocess.STDOUT)
    samples: list[tuple[str, str]] = []
    started = time.monotonic()
    try:
        while time.monotonic() - started < args.minutes * 60:
            time.sleep(30)
            rss, files = usage(scheduler.pid)
            try:
                data_files, rows = lake_query(settings, SAMPLE_SQL)[0]
            except LakeNotCreated:  # Spark still starting: the first load creates it
                data_files, rows = 0, 0
            samples.append((f"t={time.monotonic() - started:5.0f}s", f"rss {rss / 2**20:6.0f} MiB  fds "
                            f"{files:4d}  data files {data_files:4d}  lake rows {rows:8d}"))
            print(*samples[-1], flush=True)
    finally:
        generator.send_signal(signal.SIGTERM)
        generator.wait(60)
        scheduler.send_signal(signal.SIGTERM)
        code = scheduler.wait(90)
        log.close()
    catch_up = subprocess.run([py, str(ROOT / "events_pipeline.py"), "--run", "--engine", args.engine],
                              env=env, cwd=ROOT, capture_output=True, text=True)
    [comparison] = compare(embedded.resolved(settings)).tables.values()  # the soak's one table
    print_table(f"Soak: {args.minutes:g} min, ~{args.rate} events/s, engine {args.engine}"
                f"{', --follow every 2s' if args.follow else ''}", [
        *samples,
        ("scheduler exit code", str(code)),
        ("catch-up run exit code", str(catch_up.returncode)),
        ("lake rows", str(comparison.lake.rows)),
        ("source loadable rows", str(comparison.source.rows)),
        ("lake == source", str(comparison.equal)),
    ])
    if not comparison.equal:
        print(comparison.describe())
        sys.exit(1)


if __name__ == "__main__":
    main()
