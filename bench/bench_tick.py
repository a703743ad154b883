"""What one ``--follow`` tick costs: statements it sends to the source and the catalog, the
connections it opens, and its seconds, with and without new events.

    uv run --dev python bench/bench_tick.py --ticks 10 --rows 2000

The follower's own load job is run the way ``--follow`` runs it (the job lock, the load, in one
long-lived process with one Spark session), ``--ticks`` times with ``--rows`` new events before each
(2,000 every 2 s is 1k events/s at the default FOLLOW_EVERY) and ``--ticks`` times with none (the
tick's own overhead). Statements are counted from the Postgres server's log: both scratch databases
get ``log_statement = 'all'`` (the bench reads the server's log file, so it runs on the machine that
hosts BENCH_PG_DSN's server, as root or postgres).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from bench.common import BENCH_PG_DSN, drop_databases, print_table, scratch_settings
from pipeline.settings.pgdsn import PgDsn

LINE = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] \S+@(\S+) LOG:  (statement|execute [^:]*):")


def server_log() -> Path:
    """The running server's log file (Debian's pg_ctlcluster writes it under /var/log/postgresql)."""
    out = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, check=True).stdout
    return Path(out.split()[-1])  # its last column


class Statements:
    """Counts the statements and backends the server logged for some databases since a mark."""

    def __init__(self, path: Path, databases: dict[str, str]) -> None:
        self.path, self.databases = path, databases  # database name -> label
        self.offset = path.stat().st_size

    def take(self) -> dict[str, tuple[int, int]]:
        """label -> (statements, distinct backends) since the last take."""
        time.sleep(0.3)  # the server writes its log asynchronously
        with self.path.open("rb") as log_file:
            log_file.seek(self.offset)
            text = log_file.read().decode("utf-8", "replace")
            self.offset = log_file.tell()
        counts = {label: [0, set()] for label in self.databases.values()}
        self.texts: list[tuple[str, str]] = []  # (label, statement) of this take, for --show
        for line in text.splitlines():
            match = LINE.match(line)
            if match and match.group(2) in self.databases:
                entry = counts[self.databases[match.group(2)]]
                entry[0] += 1
                entry[1].add(match.group(1))
                self.texts.append((self.databases[match.group(2)], line[match.end():].strip()))
        return {label: (n, len(pids)) for label, (n, pids) in counts.items()}


def follow_tick(settings):
    """The follower's load job, run as ``--follow`` runs it (its lock, the load), and the pipeline
    to close after."""
    from pipeline.ops.pipeline import Pipeline
    from pipeline.ops.scheduler import Scheduler

    pipeline = Pipeline(settings, long_lived=True)
    scheduler = Scheduler(pipeline, follow=True)
    load = scheduler.jobs["load"]

    def tick() -> str:
        attempt = scheduler._attempt(load)
        assert attempt is not None and attempt.status == "success", attempt
        return attempt.result.summary if attempt.result else ""

    return tick, pipeline.close


def show(texts: list[tuple[str, str]]) -> None:
    """Statements by database and shape (numbers and literals blanked), most frequent first."""
    import collections

    shapes = collections.Counter((label, re.sub(r"'[^']*'|\b\d+\b", "?", text)[:160])
                                 for label, text in texts)
    for (label, shape), n in sorted(shapes.items(), key=lambda item: (item[0][0], -item[1])):
        print(f"{label:8} {n:4}  {shape}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--rows", type=int, default=2000, help="new events before each loaded tick")
    parser.add_argument("--show", action="store_true",
                        help="print the statements of the last tick without new events, by kind")
    args = parser.parse_args()
    from pipeline import embedded
    from tests.helpers import add_events

    with tempfile.TemporaryDirectory(prefix="el-tick-") as tmp:
        settings, dbs = scratch_settings(Path(tmp))
        server = PgDsn.parse(BENCH_PG_DSN, "BENCH_PG_DSN")
        with psycopg.connect(server.conninfo(), autocommit=True) as conn:
            for name in dbs:
                conn.execute(f'ALTER DATABASE "{name}" SET log_statement = \'all\'')
        close = lambda: None  # noqa: E731
        try:
            settings = embedded.resolved(settings)
            tick, close = follow_tick(settings)
            add_events(settings, args.rows, seed=1)
            tick()  # the first load: tables, Spark's start, the lake attached
            tick()
            counter = Statements(server_log(), {dbs[0]: "source", dbs[1]: "catalog"})
            loaded: list[tuple[float, dict]] = []
            idle: list[tuple[float, dict]] = []
            for i in range(args.ticks):
                add_events(settings, args.rows, seed=2 + i)
                counter.take()
                t0 = time.monotonic()
                summary = tick()
                loaded.append((time.monotonic() - t0, counter.take()))
                assert f"{args.rows} new rows" in summary, summary
            for _ in range(args.ticks):
                counter.take()
                t0 = time.monotonic()
                tick()
                idle.append((time.monotonic() - t0, counter.take()))
            if args.show:
                show(counter.texts)
        finally:
            close()
            drop_databases(dbs)

    def row(label: str, ticks: list[tuple[float, dict]]) -> list[tuple[str, str]]:
        seconds = sorted(s for s, _ in ticks)
        per = {db: (statistics.mean(c[db][0] for _, c in ticks), statistics.mean(c[db][1] for _, c in ticks))
               for db in ("source", "catalog")}
        return [(f"{label}: seconds p50 / mean",
                 f"{seconds[len(seconds) // 2]:.3f} / {statistics.mean(seconds):.3f}"),
                *((f"{label}: {db} statements / connections", f"{per[db][0]:.1f} / {per[db][1]:.1f}")
                  for db in ("source", "catalog"))]

    print_table(f"One --follow tick, mean of {args.ticks} (local Spark, Postgres source and catalog)",
                row(f"{args.rows:,} new events", loaded) + row("no new events", idle))
    return 0


if __name__ == "__main__":
    sys.exit(main())
