"""Handlers of the analysis commands: ``--sql``/``--sql-file``, ``--snapshots``, ``--changes``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import duckdb

from pipeline import actions
from pipeline.cli import output, voice
from pipeline.cli.command import Command, HandlerResult
from pipeline.errors import ConfigError
from pipeline.process import cancellable
from pipeline.settings.durations import parse_duration

SQL_TIMEOUT = "10m"  # a --sql session stops after this (--timeout; 0: no limit)

def sql_texts(args: argparse.Namespace) -> list[str]:
    texts = list(args.sql or [])
    for name in args.sql_file or []:
        texts.append(_sql_file(name).read_text())
    return texts


def _sql_file(name: str) -> Path:
    """A path, or the name of a query in sql/analysis/ (``payments_by_day``): the installed
    tool has no checkout to point a path at. Only a bare name (no ``/``, no ``.sql``) is
    looked up among the named queries, so a mistyped path is an error, never another query."""
    from pipeline.sqltext import SQL_DIR

    path = Path(name)
    is_name = "/" not in name and "\\" not in name and not name.endswith(".sql")
    if not is_name:
        if path.is_file():
            return path
        raise ConfigError(f"SQL file {name} does not exist.", "Check the path (relative paths start "
                          f"in {Path.cwd()}).")
    named = SQL_DIR / "analysis" / f"{name}.sql"
    if named.is_file():
        return named
    if path.is_file():  # a file without the .sql suffix in the current folder
        return path
    known = ", ".join(sorted(p.stem for p in (SQL_DIR / "analysis").glob("*.sql")))
    raise ConfigError(f"No named query {name!r} and no file {name} here.",
                      f"Named queries: {known}; or give the path of a .sql file.")


def run_texts(cmd: Command, texts: list[str] | Callable[[duckdb.DuckDBPyConnection], list[str]],
              cell_width: int | None = None) -> HandlerResult:
    """Run ``texts`` in one session as the flags say, print the result, and say how it went
    (``texts`` may be written from the session: a command's query that needs the lake's facts;
    ``cell_width``: a table's values are cut to it)."""
    from pipeline import embedded
    from pipeline.lake.info import catalog_info
    from pipeline.sql_session.query import describe_at, open_session, parse_params, run_session

    args = cmd.args  # the session's flags: --param, --timeout, --limit, --write, --at-*, --format
    params = parse_params(args.param or [])
    timeout = parse_duration(args.timeout or SQL_TIMEOUT, voice.FLAGS[actions.TIMEOUT]).total_seconds()
    if args.limit is not None and args.limit < 0:
        raise ConfigError(f"{voice.LIMIT} {args.limit} is negative.",
                          f"Give the rows to show per command, e.g. {voice.LIMIT} 20.")
    # settings resolved once (the embedded default started); not through a Pipeline, whose import
    # brings the load's and the engines' modules a SQL session never uses (0.2 s of its start)
    resolved = embedded.resolved(cmd.settings)
    con = open_session(resolved, write=args.write, at_version=args.at_version, at_time=args.at_time)
    try:
        everything = args.format != "table"  # data for programs: every row unless --limit
        limit = args.limit if args.limit is not None else (None if everything else output.HUMAN_ROW_LIMIT)
        if callable(texts):
            texts = texts(con)
        with cancellable(con.interrupt):  # a stop request ends the statement running now
            result = run_session(con, texts, params, limit, write=args.write, timeout=timeout or None)
        info = catalog_info(con, resolved.lake_name) if cmd.json else None
    finally:
        con.close()
    output.print_session(result, args.format, info, cell_width)
    if result.error:
        number = result.error["command_index"] + 1  # people count statements from 1
        what = "failed" if result.commands or "is not allowed" not in result.error["message"] else \
            "was refused, so nothing ran"
        return False, f"Failed: statement {number} {what}: {result.error['message'].splitlines()[0]}"
    time_travel = args.at_version is not None or args.at_time
    at = f" at {describe_at(args.at_version, args.at_time)}" if time_travel else ""
    return True, f"Ran {len(result.commands)} command(s){at}" + ("" if args.write else " (read-only).")


def sql(cmd: Command) -> HandlerResult:
    return run_texts(cmd, sql_texts(cmd.args))


def snapshots(cmd: Command) -> HandlerResult:
    from pipeline.lake.history import snapshot_listing, table_names

    def listing(con: duckdb.DuckDBPyConnection) -> list[str]:
        return [snapshot_listing(cmd.settings.lake_name, table_names(con), human=cmd.args.format == "table")]

    ok, _ = run_texts(cmd, listing)
    return ok, "Snapshots listed." if ok else "Failed to list snapshots."


CHANGE_CELL_WIDTH = 40  # a human table of changes: one row fits a terminal; other formats keep all


def changes(cmd: Command) -> HandlerResult:
    """The change feed of a table between two snapshots (or times), both included: in a table, a
    count per snapshot and kind of change first, then the rows with wide values cut (a row of
    the events table printed ~550 characters: the whole JSON of its details)."""
    from pipeline.sqltext import quote_literal

    start, end = cmd.args.changes
    schema, _, table = (cmd.args.table or cmd.settings.one_table("--table")).rpartition(".")
    schema = schema or "main"

    def bound(value: str) -> str:
        return value if value.lstrip("-").isdigit() else f"TIMESTAMPTZ {quote_literal(value)}"

    feed = (f"ducklake_table_changes({quote_literal(cmd.settings.lake_name)}, {quote_literal(schema)}, "
            f"{quote_literal(table)}, {bound(start)}, {bound(end)})")
    rows = f"SELECT * FROM {feed} ORDER BY snapshot_id, rowid"
    human = cmd.args.format == "table" and not cmd.json
    summary = (f"SELECT snapshot_id, change_type, count(*) AS rows FROM {feed} GROUP BY ALL "
               "ORDER BY snapshot_id, change_type")
    ok, _ = run_texts(cmd, [summary, rows] if human else [rows],
                      CHANGE_CELL_WIDTH if human else None)
    return ok, (f"Changes to {schema}.{table} from {start} to {end} (both included) listed"
                f"{'; --format jsonl shows every value whole' if human else ''}." if ok
                else "Failed to list changes.")


# the commands whose output is rows (they take --format csv and jsonl)
ROW_COMMANDS = (snapshots, changes)
