"""``insert_event_data_loop.py``: write fake events into Postgres, once or continuously."""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from generators.events import EVENTS_PER_SESSION
from generators.produce import BatchJob, Producer
from generators.writer import truncate
from pipeline import embedded, invocation, progress
from pipeline.errors import ConfigError, PipelineError, first_line, is_transient
from pipeline.process import exit_quietly_on_broken_pipe, on_stop
from pipeline.progress import Progress
from pipeline.settings import Settings, load_settings
from pipeline.settings.durations import parse_duration
from pipeline.settings.pgdsn import PgDsn
from pipeline.source.connect import connect
from pipeline.source.ddl import SESSIONS, ensure_table


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="event-lake-gen" if invocation.installed() else "insert_event_data_loop.py",
        description="Write realistic fake events into the source Postgres table (created if "
        "missing). With no SOURCE_PG_DSN set, the embedded Postgres under ./.lake is used.",
    )
    parser.add_argument("--rows", type=int, default=1000, help="Events per loop (default 1000).")
    parser.add_argument("--loops", type=int, default=1, help="Number of loops (default 1).")
    parser.add_argument("--delay", type=float, default=5.0,
                        help="Seconds to wait between loops (default 5).")
    parser.add_argument("--continuous", action="store_true",
                        help="Loop until interrupted (Ctrl-C or SIGTERM); ignores --loops.")
    parser.add_argument("--truncate", action="store_true",
                        help="Empty the source table before writing.")
    parser.add_argument("--seed", type=int, help="Seed for reproducible events.")
    parser.add_argument("--batch-size", type=int, default=50_000,
                        help="Rows per COPY transaction (default 50000).")
    parser.add_argument("--late-fraction", type=float, default=0.0,
                        help="Share of events stamped --late-by in the past (0-1, default 0).")
    parser.add_argument("--late-by", default="5m",
                        help="How late the late events are, e.g. 5m (default 5m).")
    parser.add_argument("--clock-skew", type=float, metavar="SECONDS",
                        help="Stamp created_at (and the events' times) from an application clock this many "
                        "seconds off the database's, e.g. -5 or 10, as ORMs do (default: the column's "
                        "DEFAULT now()).")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="Processes generating and writing batches in parallel "
                        "(default: 2, or 1 on a single core).")
    parser.add_argument("--dsn", help="Source Postgres DSN (overrides SOURCE_PG_DSN).")
    parser.add_argument("--table", help="Source table (overrides SOURCE_TABLE).")
    parser.add_argument("--sessions", metavar="TABLE",
                        help="Linked rows: --rows sessions per loop into TABLE (e.g. public.sessions: "
                        "session_id, user_id, started_at, ip_address, created_at), each with "
                        f"{EVENTS_PER_SESSION} events in the source table whose details.session_id names "
                        "it, a session and its events committed in one transaction. Load both with "
                        "SOURCE_TABLES=public.sessions:started_at:session_id,public.events.")
    parser.add_argument("--quiet", action="store_true", help="Print only the final totals.")
    return parser


class StopFlag:
    """Set by SIGINT/SIGTERM: the current batch finishes (or rolls back), then we stop."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> None:
        on_stop(self.event.set)


def entry() -> int:
    """The console script ``event-lake-gen`` and ``insert_event_data_loop.py``."""
    return exit_quietly_on_broken_pipe(main)


def check_ranges(args: argparse.Namespace) -> None:
    """Each flag out of its range is an error naming the flag, its value and the range."""
    rules = (("--rows", args.rows, args.rows >= 0, "0 or more"),
             ("--loops", args.loops, args.loops >= 1, "1 or more"),
             ("--batch-size", args.batch_size, args.batch_size >= 1, "1 or more"),
             ("--workers", args.workers, args.workers >= 1, "1 or more"),
             ("--delay", args.delay, args.delay >= 0, "0 seconds or more"),
             ("--late-fraction", args.late_fraction, 0 <= args.late_fraction <= 1, "between 0 and 1"))
    for flag, value, ok, allowed in rules:
        if not ok:
            raise ConfigError(f"{flag} {value:g} is out of range: it must be {allowed}.",
                              f"Give {flag} a value {allowed}.")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    progress.configure(enabled=not args.quiet)
    stop = StopFlag()
    stop.install()
    started = time.monotonic()
    tally = Tally()
    try:
        check_ranges(args)
        if args.sessions and "." not in args.sessions:
            args.sessions = f"public.{args.sessions}"
        settings = load_settings(flags={"SOURCE_PG_DSN": ("--dsn", args.dsn),
                                        "SOURCE_TABLE": ("--table", args.table)})
        if len(settings.tables) > 1:  # the generator writes one table (and --sessions' table)
            raise ConfigError(f"SOURCE_TABLES is set ({', '.join(t.qualified for t in settings.tables)}): "
                              "the generator writes one table and would not know which.",
                              "Name it with --table, e.g. --table public.events (with --sessions "
                              "public.sessions for linked rows).")
        # the embedded default starts only when no source is configured
        source_dsn = settings.source_dsn or embedded.resolved(settings).source_dsn
        late_by = parse_duration(args.late_by, "--late-by")
        outages = 0
        while True:
            before = tally.written
            try:
                _produce(args, settings, source_dsn, late_by, stop, tally)
                break
            except PipelineError as exc:
                # a continuous writer outlives a source restart, as the applications it stands for do;
                # the batch in flight rolled back, so nothing is counted twice
                if not (args.continuous and is_transient(exc)) or stop.event.is_set():
                    raise
                outages = 1 if tally.written > before else outages + 1
                wait = min(RETRY_CAP_SECONDS, 2 ** (outages - 1))
                print(f"source unavailable ({first_line(exc)}); retrying in {wait}s "
                      f"({tally.written} events committed so far)", file=sys.stderr, flush=True)
                if stop.event.wait(wait):
                    break
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        print(f"Failed after committing {tally.written} events.", flush=True)
        return 1
    elapsed = time.monotonic() - started
    reason = "stopped by signal" if stop.event.is_set() else "done"
    written = tally.written
    print(f"Generator {reason}: {written} events committed in {elapsed:.1f}s "
          f"({written / max(elapsed, 1e-9):,.0f} events/s).", flush=True)
    return 0


RETRY_CAP_SECONDS = 30


@dataclass
class Tally:
    """Events committed so far, across reconnections."""

    written: int = 0
    loop: int = 0


def _produce(args: argparse.Namespace, settings: Settings, source_dsn: PgDsn, late_by: timedelta,
             stop: StopFlag, tally: Tally) -> None:
    """Write loops until done or stopped, on one connection (and its workers')."""
    [table] = settings.tables  # (SOURCE_TABLES is refused: the generator writes one table)
    events = table.qualified
    with connect(source_dsn, autocommit=False) as conn:
        ensure_table(conn, events)
        if args.sessions:
            ensure_table(conn, args.sessions, SESSIONS)
        conn.commit()
        if args.truncate:
            with conn.transaction():
                for table in [events, *([args.sessions] if args.sessions else [])]:
                    truncate(conn, table)
                    print(f"Truncated {table}.", flush=True)
        batches_per_loop = -(-args.rows // args.batch_size)
        workers = max(1, min(args.workers, batches_per_loop))
        producer = Producer(conn, source_dsn.conninfo(), events, workers)
        batch_no = itertools.count(tally.loop * batches_per_loop)
        try:
            while not stop.event.is_set() and (args.continuous or tally.loop < args.loops):
                tally.loop += 1
                loop = tally.loop
                t0 = time.monotonic()
                jobs = (BatchJob(min(args.batch_size, args.rows - start),
                                 None if args.seed is None else args.seed * 1_000_003 + next(batch_no),
                                 args.late_fraction, late_by,
                                 None if args.clock_skew is None else timedelta(seconds=args.clock_skew),
                                 args.sessions)
                        for start in range(0, args.rows, args.batch_size))
                meter = Progress(f"loop {loop}", unit="events",
                                 total=args.rows * (1 + EVENTS_PER_SESSION if args.sessions else 1))
                counted = tally.written

                def committed(total: int, meter: Progress = meter, counted: int = counted) -> None:
                    meter.update(total)
                    tally.written = counted + total  # batches commit one by one: an outage keeps them

                loop_rows = producer.write(jobs, stop.event.is_set, committed=committed)
                tally.written = counted + loop_rows
                progress.clear_line()  # the loop's line below says it all
                if not args.quiet:
                    rate = loop_rows / max(time.monotonic() - t0, 1e-9)
                    into = (f"{args.sessions} and {events}" if args.sessions
                            else events)
                    print(f"loop {loop}: committed {loop_rows} events to "
                          f"{into} ({rate:,.0f} events/s; total {tally.written})",
                          flush=True)
                if args.continuous or loop < args.loops:
                    stop.event.wait(args.delay)
        finally:
            producer.close()
