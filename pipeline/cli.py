"""``events_pipeline.py``: parse flags, call the library, turn errors into plain words."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable

from pipeline import logs
from pipeline.config import Settings, load_settings
from pipeline.durations import parse_duration
from pipeline.errors import ConfigError, PipelineError, TransientError
from pipeline.pgdsn import scrub_secrets
from pipeline.scheduler_config import SHUTDOWN_SECONDS, intervals_from

log = logging.getLogger("event-lake")
ACTIONS = ("run", "extract_only", "promote_only", "demo", "status", "print_attach", "verify",
           "stop_embedded", "schedule", "maintain", "snapshots", "changes")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="events_pipeline.py",
        description="Move events from Postgres into a DuckLake with time travel. With no "
        "configuration everything runs on an embedded Postgres under ./.lake.",
        epilog="Settings come from the environment and .env (see .env.example); flags override.",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--run", action="store_true",
                        help="Promote waiting staged batches, then extract and promote new events.")
    action.add_argument("--extract-only", action="store_true",
                        help="Extract new events into a staged batch without promoting it.")
    action.add_argument("--promote-only", action="store_true",
                        help="Promote every complete staged batch, oldest first.")
    action.add_argument("--demo", action="store_true",
                        help="Generate 10,000 events, run, rerun, add late events, run, and show "
                        "snapshots and time travel.")
    action.add_argument("--status", action="store_true",
                        help="Show watermark, lag, last batches and snapshot count.")
    action.add_argument("--print-attach", action="store_true",
                        help="Print the SQL that opens this lake in the duckdb CLI "
                        "(secrets masked unless --show-secrets).")
    action.add_argument("--verify", action="store_true",
                        help="Compare the lake with the source (counts, distinct ids, checksum).")
    action.add_argument("--stop-embedded", action="store_true",
                        help="Stop the embedded Postgres under EVENT_LAKE_HOME.")
    action.add_argument("--schedule", action="store_true",
                        help="Run forever: load every --load-every, expire snapshots every "
                        "--expire-every, compact every --compact-every. SIGTERM/SIGINT stop it: "
                        "no new jobs start, a running promotion commits or rolls back, and the "
                        f"process exits 0 within {SHUTDOWN_SECONDS} seconds.")
    action.add_argument("--maintain", action="store_true",
                        help="Expire snapshots older than --retention and compact now "
                        "(with --dry-run: only report what would happen).")
    action.add_argument("--snapshots", action="store_true", help="List the lake's snapshots.")
    action.add_argument("--changes", nargs=2, metavar=("FROM", "TO"),
                        help="Change feed (inserts, deletes, updates) between two snapshot ids or "
                        "timestamps; --table picks the table (default main.events).")
    sql = parser.add_argument_group("ad-hoc SQL (read-only unless --write)")
    sql.add_argument("--sql", action="append", metavar="SQL",
                     help="SQL to run; repeatable, run in order in one session.")
    sql.add_argument("--sql-file", action="append", metavar="FILE",
                     help="File of SQL statements (e.g. sql/analysis/*.sql); repeatable.")
    sql.add_argument("--param", action="append", metavar="NAME=VALUE",
                     help="Value for $NAME in the SQL; repeatable.")
    sql.add_argument("--at-version", type=int, metavar="N",
                     help="Read the whole session at snapshot N (time travel).")
    sql.add_argument("--at-time", metavar="TS",
                     help="Read the whole session as of timestamp TS, e.g. '2026-11-21 10:00:00+00'.")
    sql.add_argument("--table", help="With --changes: schema.table (default main.events).")
    sql.add_argument("--limit", type=int, help="Rows shown per command (default 100 as text, "
                     "all as JSON); row_count is always the true count.")
    sql.add_argument("--write", action="store_true",
                     help="Allow statements that change the lake (otherwise it is attached read-only).")
    parser.add_argument("--engine", choices=("spark", "dlt"), default="spark",
                        help="Extraction engine (default spark).")
    parser.add_argument("--lookback", help="Override LOOKBACK, e.g. 15m.")
    parser.add_argument("--json", action="store_true", help="Machine-readable output.")
    timing = parser.add_argument_group("scheduling and maintenance (units s, m, h, d, w)")
    timing.add_argument("--load-every", help="Load interval (env LOAD_EVERY, default 1h).")
    timing.add_argument("--expire-every", help="Snapshot expiry interval (env EXPIRE_EVERY, default 1d).")
    timing.add_argument("--compact-every", help="Compaction interval (env COMPACT_EVERY, default 1w).")
    timing.add_argument("--retention", help="Keep snapshots this long for time travel "
                        "(env RETENTION, default 7d).")
    timing.add_argument("--run-now", action="store_true", help="With --schedule: load at start.")
    timing.add_argument("--dry-run", action="store_true",
                        help="With --maintain: show what would be expired, merged and deleted.")
    parser.add_argument("--show-secrets", action="store_true",
                        help="With --print-attach: print real credentials instead of ***.")
    parser.add_argument("--verbose", action="store_true", help="Debug logging.")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.setup(args.verbose)
    try:
        settings = load_settings()
        if args.lookback:
            settings = settings.with_overrides(lookback=parse_duration(args.lookback, "--lookback"))
        ok, message = _dispatch(args, settings)
    except PipelineError as exc:
        retry = " (temporary: retrying later may succeed)" if isinstance(exc, TransientError) else ""
        print(f"error: {scrub_secrets(str(exc))}", file=sys.stderr)
        print(f"Failed{retry}: {scrub_secrets(str(exc)).splitlines()[0]}")
        return 1
    except KeyboardInterrupt:
        print("Interrupted; nothing half-done was committed.")
        return 130
    except Exception as exc:  # an unexpected failure still ends with a plain last line
        log.exception("unexpected error")
        print(f"Failed with an unexpected error: {scrub_secrets(str(exc)).splitlines()[0]}")
        return 1
    print(message)
    return 0 if ok else 1


def _dispatch(args: argparse.Namespace, settings: Settings) -> tuple[bool, str]:
    from pipeline import analysis

    if args.sql or args.sql_file:
        if any(getattr(args, n) for n in ACTIONS):
            raise ConfigError("--sql/--sql-file cannot be combined with another action.")
        return analysis.run_sql(args, settings)
    if args.snapshots:
        return analysis.run_snapshots(args, settings)
    if args.changes:
        return analysis.run_changes(args, settings)
    handlers: dict[str, Callable[[argparse.Namespace, Settings], tuple[bool, str]]] = {
        "run": _run, "extract_only": _run, "promote_only": _run, "demo": _demo,
        "status": _status, "print_attach": _print_attach, "verify": _verify,
        "stop_embedded": _stop_embedded, "schedule": _schedule, "maintain": _maintain,
    }
    for name, handler in handlers.items():
        if getattr(args, name):
            return handler(args, settings)
    raise ConfigError("Nothing to do.", "Give an action such as --run, --demo, --status or --sql; "
                      "see --help.")


def _run(args: argparse.Namespace, settings: Settings) -> tuple[bool, str]:
    from pipeline.run import run

    mode = "extract" if args.extract_only else "promote" if args.promote_only else "run"
    report = run(settings, mode=mode, engine=args.engine)
    if args.json:
        print(json.dumps({"status": "ok", "rows_inserted": report.rows_inserted,
                          "snapshots": report.snapshots, "staged_batch": report.staged_batch,
                          "watermark": report.watermark.isoformat() if report.watermark else None,
                          "seconds": report.seconds}))
    return True, f"Done: {report.summary()}."


def _demo(args: argparse.Namespace, settings: Settings) -> tuple[bool, str]:
    from pipeline.demo import demo

    ok = demo(settings, engine=args.engine)
    return ok, ("Demo complete: events flowed into the lake, the rerun added nothing, late "
                "events were caught, and the lake matches the source." if ok
                else "Demo finished, but the lake does NOT match the source (see above).")


def _status(args: argparse.Namespace, settings: Settings) -> tuple[bool, str]:
    from pipeline import services, status

    data = status.collect(services.resolve(settings))
    print(json.dumps(data, indent=2) if args.json else status.render(data))
    return True, "Status shown."


def _verify(args: argparse.Namespace, settings: Settings) -> tuple[bool, str]:
    from pipeline import services, verify

    comparison = verify.compare(services.resolve(settings))
    return comparison.equal, comparison.describe()


def _print_attach(args: argparse.Namespace, settings: Settings) -> tuple[bool, str]:
    from pipeline import extensions, services
    from pipeline.attach import StorageOptions, open_statements

    resolved = services.resolve(settings)
    assert resolved.catalog is not None and resolved.data_path is not None
    for statement in open_statements(resolved.lake_name, resolved.catalog, resolved.data_path,
                                     storage=StorageOptions.from_env(),
                                     show_secrets=args.show_secrets):
        if statement.startswith("LOAD "):
            name = statement.split()[1]
            print(f"INSTALL '{extensions.wheel_extension_path(name)}';")
        print(f"{statement};")
    return True, "-- Paste the statements above into the duckdb CLI (same version) to open the lake."


def _stop_embedded(args: argparse.Namespace, settings: Settings) -> tuple[bool, str]:
    from pipeline import embedded

    stopped = embedded.stop(settings.home)
    return True, "Embedded Postgres stopped." if stopped else "Embedded Postgres was not running."


def _schedule(args: argparse.Namespace, settings: Settings) -> tuple[bool, str]:
    from pipeline.scheduler import Scheduler

    Scheduler(settings, intervals_from(args), engine=args.engine).serve(run_now=args.run_now)
    return True, "Scheduler stopped cleanly."


def _maintain(args: argparse.Namespace, settings: Settings) -> tuple[bool, str]:
    from pipeline import locks, maintain, services

    resolved = services.resolve(settings)
    retention = intervals_from(args).retention
    with locks.hold(resolved, "job:expire", timeout=0), locks.hold(resolved, "job:compact", timeout=0):
        report = maintain.run_maintenance(resolved, retention, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    return True, f"Maintenance {'dry run ' if args.dry_run else ''}done: {report.describe()}."
