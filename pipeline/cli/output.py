"""Everything the pipeline CLI prints: text tables, JSON, status, the demo, and errors.

The library returns data; only this module decides how it looks on a terminal or as JSON.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import simplejson

from pipeline.cli import docs_links
from pipeline.errors import PipelineError, TransientError, first_line, is_transient, scrub_secrets
from pipeline.source.window import iso

if TYPE_CHECKING:  # the lake's modules import duckdb: not needed to print --help
    from pipeline.lake.batches import SteadyState
    from pipeline.load.proof import RangeCheck
    from pipeline.ops.status import Status, TableStatus
    from pipeline.sql_session.query import SessionResult

HUMAN_ROW_LIMIT = 100


def out(text: str = "") -> None:
    print(text, flush=True)


def err(text: str = "", end: str = "\n") -> None:
    """A line for the person at the terminal (a question, a preview): stderr, never stdout."""
    print(text, end=end, file=sys.stderr, flush=True)


def dumps(value: Any) -> str:
    """JSON with exact decimals and ISO timestamps (``default=str`` for anything else)."""
    return simplejson.dumps(value, use_decimal=True, indent=2, ignore_nan=True, default=str)


def render_table(columns: list[str], rows: list[dict[str, object]], cell_width: int | None = None) -> str:
    """An aligned text table with a header line; values longer than ``cell_width`` end in "…"."""
    cells = [[_cut(_cell(r[c]), cell_width) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]

    def line(values: list[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def _cut(text: str, width: int | None) -> str:
    return text if width is None or len(text) <= width else text[:width - 1] + "…"


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, dict | list):
        return simplejson.dumps(value, use_decimal=True)
    return str(value)


def print_session(result: SessionResult, fmt: str, info: dict[str, object] | None,
                  cell_width: int | None = None) -> None:
    """An ad-hoc SQL session: the documented JSON shape, one table per statement, or the rows of
    each statement that returns rows as CSV (a header each, a blank line between) or JSON lines.
    ``cell_width``: the table's values are cut to it (the other formats keep them whole)."""
    if fmt == "json":
        payload: dict[str, Any] = {"status": "error" if result.error else "ok",
                                   "result": {"command_count": len(result.commands),
                                              "commands": [c.as_dict() for c in result.commands]},
                                   "catalog_info": info}
        if result.error:
            payload["error"] = result.error
        out(dumps(payload))
        return
    with_rows = [c for c in result.commands if c.columns is not None]
    if fmt == "csv":
        out("\n".join(render_csv(c.columns or [], c.rows or []) for c in with_rows).rstrip("\n"))
    elif fmt == "jsonl":
        for command in with_rows:
            for row in command.rows or []:
                out(simplejson.dumps(row, use_decimal=True, ignore_nan=True, default=str))
    else:
        for command in result.commands:
            if command.columns is not None:
                out(render_table(command.columns, command.rows or [], cell_width))
                more = f", the first {len(command.rows or [])} shown" if command.truncated else ""
                out(f"({command.row_count} row{'s' if command.row_count != 1 else ''}){more}\n")
            else:
                out(f"ok ({command.affected_rows} row(s) affected)\n")
    if result.error:
        print(f"error in statement {result.error['command_index'] + 1}: {result.error['message']}",
              file=sys.stderr)


def render_csv(columns: list[str], rows: list[dict[str, object]]) -> str:
    """RFC 4180 CSV with a header; NULL is an empty field, nested values are JSON text."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row[c] is None else _cell(row[c]) for c in columns])
    return buffer.getvalue()


def _steady_line(hour: SteadyState | None) -> str:
    """Loads of the last hour: rows read for rows inserted, and arrival -> lake seconds."""
    if not hour or not hour["loads"]:
        return "last hour       no loads"
    fresh = (f"; arrival -> lake p50 {hour['freshness_p50_seconds']:.1f}s, "
             f"p95 {hour['freshness_p95_seconds']:.1f}s" if hour["freshness_p95_seconds"] is not None else "")
    ratio = hour["rows_read_per_inserted"]
    return (f"last hour       {hour['loads']} load(s) read {hour['rows_read']:,} rows, inserted "
            f"{hour['rows_inserted']:,}" + (f" ({ratio:.2f} read per inserted)" if ratio else "") + fresh)


def _identity_line(check: RangeCheck) -> str:
    """The look-back compared id by id: proven up to the watermark, and how long ago that is."""
    if not check.exact:
        waiting = len(check.missing) - len(check.missed)
        late = f"; {waiting} of the missing id(s) arrived after the last load and wait for the next" \
            if waiting > 0 else ""
        return check.describe() + late
    age = (datetime.now(UTC) - check.upper).total_seconds()
    return (f"lake == source over the look-back up to the watermark ({check.source.count:,} id(s); "
            f"proven through {iso(check.upper)}, {age:.0f}s ago)")


def _table_line(name: str, table: TableStatus) -> str:
    """A SOURCE_TABLES table: its rows, watermark and lag (a table added later says it is catching up)."""
    doc = table.table_dict()
    state = "" if table.health.code == 0 else f" {table.health.state.upper()}"
    if table.watermark is None:
        where = "not loaded yet: its next load reads its history, in parts of BACKFILL_BATCH_ROWS rows"
    else:
        lag = f"{table.lag_seconds:.0f}s" if table.lag_seconds is not None else "-"
        where = (f"watermark {doc['watermark']}, lag {lag}, "
                 f"{table.source_rows_after_watermark if table.source_up else '?'} source rows after it")
    proof = f"; by identity {_identity_line(table.identity)}" if table.identity else ""
    catching = (f"; CATCHING UP: {table.history.describe() if table.history else 'its history'} read in "
                "parts of BACKFILL_BATCH_ROWS rows, each committed; the next load goes on"
                if table.catching_up else "")
    return f"table {name:<9} {table.lake_rows} rows{state}; {where}{catching}{proof}"


def render_status(status: Status) -> str:
    lag, health, up = status.lag_seconds, status.health, status.source_up
    doc = status.as_dict()  # the instants as --status --json writes them
    lines = [
        f"health          {health.state.upper()}"
        + (f": {'; '.join(health.reasons)}" if health.reasons else "")
        + (f" (last successful load {health.last_success.isoformat()})" if health.last_success else ""),
        f"lake            {status.lake}  ({status.lake_rows} rows, "
        f"{status.snapshot_count} snapshots, latest {status.latest_snapshot})"
        if status.lake_exists else
        f"lake            {status.lake}: not created yet (the first --run creates it)",
        f"catalog         {status.catalog}",
        f"data path       {status.data_path}",
        f"watermark       {doc['watermark'] or 'none (nothing promoted yet)'}",
        f"source newest   {doc['source_newest_event'] or '-'}" if up else
        f"source          DOWN: {status.source_error}",
        f"lag             {f'{lag:.0f}s' if lag is not None else '-'}; "
        f"{status.source_rows_after_watermark if up else '?'} source rows after the watermark",
        *([f"by identity     {_identity_line(status.identity)}"] if status.identity else []),
        *([f"history         {status.history.describe()} (read in parts of BACKFILL_BATCH_ROWS rows; a "
           "load goes on from the last committed part)"] if status.history else []),
        *([f"typed keys      {status.payload.describe()}"]
          if status.payload.typed or status.payload.drift else []),
        *[f"schema change   {change.describe()}" for change in status.schema_changes],
        f"data files      {status.data_files} ({status.data_bytes:,} bytes)",
        f"staged, waiting {status.staged_batches_waiting} batch(es)",
        f"quarantined     {status.rows_quarantined} row(s) that cannot be loaded"
        + (" (SELECT * FROM <lake>.ops.quarantine)" if status.rows_quarantined else ""),
        f"future-dated    {status.source_rows_in_future if up else '?'} source row(s), loaded when due",
        *[f"SET ASIDE       batch {b['batch_id']}: {b['error']} (fix, then --retry-failed)"
          for b in status.set_aside_batches],
        *([f"arrivals        {status.arrivals.note}"] if status.arrivals.note else []),
        _steady_line(status.last_hour),
        *[_table_line(name, table) for name, table in status.tables.items()],
        "last batches:",
    ]
    for b in doc["last_batches"]:
        table = f"{b.get('table_name')!s:9}  " if status.tables else ""  # SOURCE_TABLES: whose batch
        lines.append(f"  {table}{b['batch_id']}  {b['engine']:5}  staged {b['rows_staged']:>8}  "
                     f"inserted {b['rows_inserted']:>8}  dup {b['rows_duplicate']:>6}  "
                     f"at {b['promoted_at']}")
    if not status.last_batches:
        lines.append("  (none)")
    planned_jobs = status.scheduler.get("jobs", {}) if status.scheduler else {}
    lines.append("jobs:" + ("" if status.scheduler else "  (no scheduler running)"))
    for name in ("load", "expire", "compact", "reconcile"):
        last = status.jobs.get(name)
        planned = planned_jobs.get(name)
        result = (f"last {last['status']} at {last['finished_at']}"
                  + (f" ({last['error']})" if last["error"] else "")) if last else "never run"
        nxt = f"; next {planned['next_run']}" if planned and planned["next_run"] else ""
        lines.append(f"  {name:8} {result}{nxt}")
    return "\n".join(lines)


def render_checks(checks: list[Any]) -> str:
    """doctor's checks (``pipeline.ops.doctor.Check``): one line each, the fix under a failure."""
    marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "skipped": "skip"}
    lines = []
    for check in checks:
        lines.append(f"  {marks[check.status]}  {check.name:18} {check.detail}  ({check.seconds:.1f}s)")
        if check.hint and check.status != "ok":
            lines.append(f"        fix: {check.hint}")
    return "\n".join(lines)


def render_demo(result: Any) -> str:
    """The demo's snapshot list and its time-travel comparison (``result``: a DemoResult)."""
    lines = ["", "  snapshot  time                              commit message"]
    for snapshot_id, at, message in result.snapshots:
        lines.append(f"  {snapshot_id:>8}  {at.isoformat():32}  {message or ''}")
    then, now = result.counts_before, result.counts_now
    lines += ["", f"  events by type   AT (VERSION => {result.before_version})   now    difference"]
    for event_type in sorted(now):
        lines.append(f"  {event_type:18} {then.get(event_type, 0):>12} {now[event_type]:>8} "
                     f"{now[event_type] - then.get(event_type, 0):>+10}")
    lines.append(f"  {'total':18} {sum(then.values()):>12} {sum(now.values()):>8} "
                 f"{sum(now.values()) - sum(then.values()):>+10}")
    if result.joins:  # SOURCE_TABLES: the sessions/events join at every version since their load
        lines += ["", "  version   events without their session   sessions without all their events"]
        lines += [f"  {version:>7}   {orphans:>28}   {short:>33}" for version, orphans, short in result.joins]
    return "\n".join(lines) + "\n"


def last_line(text: str, *, machine: bool = False) -> None:
    """The plain last line: on stdout, or for machine-readable output (``--json``, ``--format
    csv|jsonl``) on stderr, so stdout holds only the data."""
    print(text, file=sys.stderr if machine else sys.stdout, flush=True)


def print_error(exc: PipelineError, *, fmt: str = "table") -> None:
    """The message and its hint on stderr; the plain last line on stdout, or with ``--json``
    the error as the one JSON document there (csv and jsonl: stdout stays empty)."""
    message = scrub_secrets(str(exc))
    print(f"error: {message}", file=sys.stderr)
    if exc.hint:
        print(f"  hint: {scrub_secrets(exc.hint)}", file=sys.stderr)
    print(f"  docs: {docs_links.for_error(exc)}", file=sys.stderr)
    temporary = isinstance(exc, TransientError)
    if fmt == "json":
        out(dumps({"status": "error", "error": message, "hint": scrub_secrets(exc.hint) or None,
                   "temporary": temporary, "docs": docs_links.for_error(exc)}))
        return
    retry = " (temporary: retrying later may succeed)" if temporary else ""
    if fmt == "table" and _one_screen():  # the error is right above: saying it again was noise
        last_line(f"Failed{retry}.")
        return
    last_line(f"Failed{retry}: {first_line(message)}", machine=fmt != "table")


def _one_screen() -> bool:
    """stdout and stderr on the same terminal (a person reading, not a script or a log)."""
    try:
        return os.isatty(1) and os.isatty(2) and os.ttyname(1) == os.ttyname(2)
    except OSError:
        return False


def print_unexpected(exc: BaseException, traceback_file: str | None, *, fmt: str = "table") -> None:
    """An error we did not anticipate: one line, and where its traceback went."""
    message = first_line(scrub_secrets(str(exc))) or type(exc).__name__
    hint = (f"The traceback is in {traceback_file} (or run again with --verbose); please report it "
            "with that file." if traceback_file else "Run again with --verbose for the traceback.")
    print(f"  hint: {hint}", file=sys.stderr)
    print(f"  docs: {docs_links.readable(docs_links.UNEXPECTED)}", file=sys.stderr)
    if fmt == "json":
        out(dumps({"status": "error", "error": message, "hint": hint, "temporary": is_transient(exc),
                   "docs": docs_links.readable(docs_links.UNEXPECTED)}))
        return
    last_line(f"Failed with an unexpected error: {message}", machine=fmt != "table")
