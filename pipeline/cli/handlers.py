"""The pipeline actions: each handler calls the library and returns (ok, last line).

:data:`ACTIONS` is the one list of actions: the parser builds its flags from it and
:func:`pipeline.cli.main.main` dispatches through it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from pipeline import actions, invocation
from pipeline.cli import analysis, output, voice
from pipeline.cli.command import Command, HandlerResult
from pipeline.ops.policy import SHUTDOWN_SECONDS


def run(cmd: Command) -> HandlerResult:
    from pipeline.load.run import RunMode
    from pipeline.ops.pipeline import Pipeline

    flags = cmd.args
    promote_only = flags.promote_only or flags.retry_failed
    mode = RunMode.EXTRACT if flags.extract_only else RunMode.PROMOTE if promote_only else RunMode.RUN
    with Pipeline(cmd.settings, engine=flags.engine) as pipeline:
        # recorded in the job history like a scheduled load: --status's freshness counts manual runs too
        record_as = "load" if mode is RunMode.RUN else str(mode)
        report = pipeline.retry_failed() if flags.retry_failed else pipeline.run(mode, record_as=record_as)
        pipeline.compact_if_piled(report)  # a --run from cron each minute: small files merged as they pile up
    if cmd.json:
        output.out(output.dumps({"status": "ok", **report.as_dict()}))
    if report.set_aside or report.lacking:
        return False, f"Done, but not everything loaded: {report.summary()}."
    return True, f"Done: {report.summary()}."


def reconcile(cmd: Command) -> HandlerResult:
    from pipeline.ops.pipeline import Pipeline

    with Pipeline(cmd.settings) as pipeline:
        report = pipeline.reconcile_now()
    if cmd.json:
        output.out(output.dumps({"status": "ok", **report.as_dict()}))
    return True, f"Reconciled: {report.summary()}."


def _since(args: argparse.Namespace) -> timedelta | None:
    """--since as a duration, or None for all (what --verify and --repair compare)."""
    from pipeline.settings.durations import parse_duration

    since = args.since
    return None if since is None or since.lower() == "all" else parse_duration(since, "--since")


def repair(cmd: Command) -> HandlerResult:
    from pipeline.ops.pipeline import Pipeline

    with Pipeline(cmd.settings) as pipeline:
        report = pipeline.repair(_since(cmd.args))
    if cmd.json:
        output.out(output.dumps({"status": "ok", **report.as_dict()}))
    return True, f"Repair: {report.summary()}."


def demo(cmd: Command) -> HandlerResult:
    from pipeline.ops.demo import demo as run_demo

    result = run_demo(cmd.settings, engine=cmd.args.engine)
    output.out(output.render_demo(result))
    if result.ok:
        typed = "" if invocation.installed() else "uv run "  # as the demo itself was started
        output.out("Next: " + "; ".join(typed + voice.command(*a) for a in (
            ("--sql", '"SELECT event_type, count(*) FROM events GROUP BY ALL"'), ("--status",),
            ("--follow",), ("--serve",))) + " (the dashboard).")
    return result.ok, ("Demo complete: events flowed into the lake, the rerun added nothing, late "
                       "events were caught, and the lake matches the source." if result.ok
                       else "Demo finished, but the lake does NOT match the source (see above).")


def status(cmd: Command) -> HandlerResult:
    from pipeline.errors import TransientError
    from pipeline.ops.health import unreadable
    from pipeline.ops.pipeline import Pipeline
    from pipeline.storage.outage import store_outage

    pipeline = Pipeline(cmd.settings)
    try:
        with pipeline:
            data = pipeline.status()
    except (TransientError, OSError) as exc:
        outage = exc if isinstance(exc, TransientError) else store_outage(pipeline.settings, exc)
        if outage is None:
            raise
        judged = unreadable(outage)
        if cmd.json:
            document = {"health": judged.as_dict(), "lake_readable": False, "hint": outage.hint}
            output.out(output.dumps(document))
        return judged.code, f"Status: {judged.state} ({judged.reasons[0]}); {outage.hint}"
    output.out(output.dumps(data.as_dict()) if cmd.json else output.render_status(data))
    health = data.health
    reasons = "; ".join(health.reasons)
    # exit code 0 healthy, 1 stale, 2 failing: what monitors and process managers check
    return health.code, f"Status: {health.state}" + (f" ({reasons})." if reasons else ".")


def verify(cmd: Command) -> HandlerResult:
    from pipeline.ops.pipeline import Pipeline

    with Pipeline(cmd.settings) as pipeline:  # every table of the image against its source
        if cmd.args.since:  # by identity, bucket by bucket: no row read where the buckets agree
            check = pipeline.prove(_since(cmd.args))
            return check.exact, check.describe()
        comparison = pipeline.verify()
        return comparison.equal, comparison.describe()


def print_attach(cmd: Command) -> HandlerResult:
    import duckdb

    from pipeline.lake import extensions
    from pipeline.lake.attach_sql import extension_names, open_statements
    from pipeline.ops.pipeline import Pipeline

    with Pipeline(cmd.settings) as pipeline:  # settings resolved once, in the pipeline
        resolved = pipeline.settings
    # read-only as the reader role when there is one (as a read-only --sql session opens it);
    # --write: as DUCKLAKE_CATALOG's role, read-write
    reader = None if cmd.args.write or resolved.catalog.pg is None else resolved.catalog.reader
    # install the pinned extensions where the duckdb CLI of the same version finds them
    extensions.new_instance(*extension_names(resolved.catalog, resolved.data_path)).close()
    output.out(f"-- DuckDB {duckdb.__version__}: the duckdb CLI must be this version (a newer one fetches "
               "its extensions online), e.g. `uv tool run --from duckdb-cli=="
               f"{duckdb.__version__} duckdb`; extensions were installed from the pinned wheels into "
               "~/.duckdb/extensions")
    for statement in open_statements(resolved.lake_name, resolved.catalog, resolved.data_path,
                                     storage=resolved.storage, show_secrets=cmd.args.show_secrets,
                                     read_only=reader is not None, catalog_role=reader):
        output.out(f"{statement};")
    how = (f"read-only, as the reader role {reader.user}; {voice.FLAGS[actions.WRITE]} for the writer's"
           if reader is not None else "read-write, as DUCKLAKE_CATALOG's role")
    return True, f"-- Paste the statements above into the duckdb CLI (same version) to open the lake ({how})."


def stop_embedded(cmd: Command) -> HandlerResult:
    from pipeline import embedded

    stopped = embedded.stop(cmd.settings.home)
    return True, "Embedded Postgres stopped." if stopped else "Embedded Postgres was not running."


def schedule(cmd: Command) -> HandlerResult:
    from pipeline.ops.pipeline import Pipeline

    with Pipeline(cmd.settings, engine=cmd.args.engine, long_lived=True) as pipeline:
        pipeline.schedule(run_now=cmd.args.run_now)
    return True, "Scheduler stopped cleanly."


def follow(cmd: Command) -> HandlerResult:
    from pipeline.ops.pipeline import Pipeline

    with Pipeline(cmd.settings, engine=cmd.args.engine, long_lived=True) as pipeline:
        pipeline.follow()
    return True, "Stopped following cleanly."


def serve(cmd: Command) -> HandlerResult:
    import threading

    from pipeline.errors import ConfigError
    from pipeline.ops.pipeline import Pipeline
    from pipeline.ops.web import WebServer
    from pipeline.process import on_stop

    with Pipeline(cmd.settings) as pipeline:  # settings resolved once, in the pipeline
        resolved = pipeline.settings
    if not resolved.metrics_port:
        raise ConfigError("METRICS_PORT is 0, which turns the web server off.",
                          "Give --metrics-port 8900 (or set METRICS_PORT) to serve.")
    stop = threading.Event()
    on_stop(stop.set)
    server = WebServer(resolved).start()
    output.last_line(f"Serving the dashboard at {server.url} (/metrics, /healthz); Ctrl-C stops.",
                     machine=True)  # progress, not the result: stderr
    # with a timeout: a signal the kernel delivers to another thread (DuckDB's, the server's)
    # does not interrupt a wait without one, and SIGTERM would go unnoticed
    while not stop.wait(0.5):
        pass
    server.stop()
    return True, "Server stopped."


def maintain(cmd: Command) -> HandlerResult:
    from pipeline.ops.pipeline import Pipeline

    with Pipeline(cmd.settings) as pipeline:
        report = pipeline.maintain_now(dry_run=cmd.args.dry_run)
    if cmd.json:
        output.out(output.dumps(report.as_dict()))
    return True, f"Maintenance {'dry run ' if cmd.args.dry_run else ''}done: {report.describe()}."


def erase(cmd: Command) -> HandlerResult:
    import sys

    from pipeline.errors import ConfigError
    from pipeline.ops.pipeline import Pipeline

    [value] = cmd.args.erase
    if not value.strip():
        raise ConfigError("--erase was given an empty value: nothing was erased.",
                          "Give the subject's value as SUBJECT_KEY holds it, e.g. --erase user-42.")
    dry_run, asked = cmd.args.dry_run, cmd.args.yes
    with Pipeline(cmd.settings) as pipeline:
        if not dry_run and not asked:
            if cmd.json or not sys.stdin.isatty():
                raise ConfigError("--erase removes the subject's rows from the lake and its history for "
                                  "good, and asks first; it cannot ask here (no terminal, or --json): "
                                  "nothing was erased.",
                                  "See what it would do with --dry-run, then run it again with --yes.")
            preview = pipeline.erase(value, dry_run=True)
            output.err(f"This would {preview.describe().removeprefix('dry run, nothing changed: would ')}.")
            output.err("Erase for good? Type yes: ", end="")
            if sys.stdin.readline().strip().lower() != "yes":
                return False, "Nothing was erased (not confirmed)."
        report = pipeline.erase(value, dry_run=dry_run)
    if cmd.json:
        output.out(output.dumps({"status": "ok", **report.as_dict()}))
    return True, f"Erasure {'dry run ' if dry_run else ''}done: {report.describe()}."


def erasures(cmd: Command) -> HandlerResult:
    from pipeline.ops.pipeline import Pipeline

    with Pipeline(cmd.settings) as pipeline:
        found = pipeline.erasures()
    if cmd.json:
        output.out(output.dumps({"erasures": [receipt.as_dict() for receipt in found]}))
    else:
        for receipt in found:
            output.out(receipt.summary())
    pending = [r.erasure_id for r in found if not r.done]
    if pending:
        return False, (f"{len(found)} erasure(s); {len(pending)} interrupted ({', '.join(pending)}): "
                       "run --erase again to complete them.")
    return True, f"{len(found)} erasure(s), each complete."


def doctor(cmd: Command) -> HandlerResult:
    from pipeline.ops.doctor import FAIL, run_checks

    checks = run_checks(cmd.settings)
    failed = [c.name for c in checks if c.status == FAIL]
    if cmd.json:
        output.out(output.dumps({"status": "error" if failed else "ok",
                                 "checks": [c.as_dict() for c in checks]}))
    else:
        output.out(output.render_checks(checks))
    if failed:
        return False, f"Doctor: {len(failed)} check(s) failed ({', '.join(failed)}); fix them as hinted."
    return True, "Doctor: everything this setup needs works."


def dest(flag: str) -> str:
    """``--extract-only`` -> ``extract_only``, the attribute argparse stores it under."""
    return flag.removeprefix("--").replace("-", "_")


def action_word(flag: str) -> str:
    """``--extract-only`` -> ``extract-only``: the action as a word (``event-lake extract-only``)."""
    return flag.removeprefix("--")


@dataclass(frozen=True)
class FlagAction:
    """One mutually exclusive action flag and the handler that runs it."""

    flag: str
    help: str
    handler: Callable[[Command], HandlerResult]
    metavar: tuple[str, ...] | None = None

    @property
    def dest(self) -> str:
        return dest(self.flag)


ACTIONS: tuple[FlagAction, ...] = (
    FlagAction("--run", "Promote waiting staged batches, then extract and promote new events.", run),
    FlagAction("--extract-only", "Extract new events into a staged batch without promoting it.", run),
    FlagAction("--promote-only", "Promote every complete staged batch, oldest first.", run),
    FlagAction("--reconcile", "Load events that reached the source later than the look-back: compare "
           "source and lake hour by hour over --since (default RECONCILE_SINCE) and backfill what is "
           "missing in one snapshot.", reconcile),
    FlagAction("--retry-failed", "Put batches that were set aside (they could not be promoted) back in line "
           "and promote them, after fixing the cause.", run),
    FlagAction("--demo", "Generate 10,000 events, run, rerun, add late events, run, and show snapshots "
           "and time travel.", demo),
    FlagAction("--status", "Show watermark, lag, last batches and snapshot count.", status),
    FlagAction("--print-attach", "Print the SQL that opens this lake in the duckdb CLI (secrets masked "
           "unless --show-secrets).", print_attach),
    FlagAction("--verify", "Compare the lake with the source (counts, distinct ids, checksum); with --since "
           "DURATION (or all): by id, bucket by bucket, up to the watermark, naming the first bucket that "
           "differs.", verify),
    FlagAction("--repair", "Make the lake hold exactly the source's ids over --since before the watermark "
           "(default: all): the lake's rows of every id the source deleted or moved after loading are "
           "replaced by the source's, in one snapshot whose commit message says so (time travel keeps "
           "the state before).", repair),
    FlagAction("--doctor", "Check the setup: Java (and the JDBC driver when SPARK_READER=jdbc), the DuckDB "
           "extension wheels, source and catalog connectivity, the read-only SQL reader role, the data "
           "and staging locations, and a Spark start whose executors read the source; each failure "
           "with its fix (exit 1 if any fails).", doctor),
    FlagAction("--stop-embedded", "Stop the embedded Postgres under EVENT_LAKE_HOME.", stop_embedded),
    FlagAction("--schedule", "Run forever: load every --load-every, expire snapshots every --expire-every, "
           "compact every --compact-every. SIGTERM/SIGINT stop it: no new jobs start, a running "
           "promotion commits or rolls back, and the process exits 0 within "
           f"{SHUTDOWN_SECONDS} seconds.", schedule),
    FlagAction("--follow", "Load continuously: a load starts every --every (default FOLLOW_EVERY, 2s) in one "
           "Spark session and one lake session, reading only what arrived; small files are merged every "
           "5 minutes, snapshots expire as with --schedule. SIGTERM/SIGINT let the micro-batch in flight "
           f"finish, then exit 0 (within {SHUTDOWN_SECONDS} seconds).", follow),
    FlagAction("--serve", "Serve the dashboard (/), Prometheus /metrics and /healthz on METRICS_HOST:"
           "METRICS_PORT without running the scheduler (--schedule serves them too).", serve),
    FlagAction("--maintain", "Expire snapshots older than --retention and compact now (with --dry-run: "
           "only report what would happen).", maintain),
    FlagAction("--erase", "Forget a subject: remove every row whose SUBJECT_KEY holds VALUE from the lake, "
           "its quarantine, every snapshot time travel keeps, the data and staging files and the catalog, "
           "never to be loaded again, and keep a receipt (a keyed hash, never the value). Asks first "
           "(--yes: does not); --dry-run shows the rows, files and lost time travel and changes nothing.",
           erase, metavar=("VALUE",)),
    FlagAction("--erasures", "List the erasure receipts: when, keys, the value's keyed hash, rows per table, "
           "ids checksum, the first snapshot without the subject.", erasures),
    FlagAction("--snapshots", "List the lake's snapshots.", analysis.snapshots),
    FlagAction("--changes", "Change feed (inserts, deletes, updates) between two snapshot ids or "
           "timestamps; --table picks the table (default: the one table loaded; with several, required).",
           analysis.changes,
           metavar=("FROM", "TO")),
)
