"""Analysis commands: ``--sql``/``--sql-file``, ``--snapshots``, ``--changes``, as text or JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import duckdb
import simplejson

from pipeline import lake, services
from pipeline.config import Settings
from pipeline.errors import ConfigError, PipelineError
from pipeline.query import SessionResult, catalog_info, parse_params, run_session

HUMAN_ROW_LIMIT = 100


def dumps(value: Any) -> str:
    return simplejson.dumps(value, use_decimal=True, indent=2, ignore_nan=True, default=str)


def open_session(settings: Settings, args: argparse.Namespace) -> duckdb.DuckDBPyConnection:
    """The lake attached read-only (unless --write), at --at-version/--at-time if given."""
    if args.write and (args.at_version is not None or args.at_time):
        raise ConfigError("--write cannot be combined with --at-version/--at-time.",
                          "Time travel is read-only; drop --write or the snapshot option.")
    try:
        return lake.connect(settings, read_only=not args.write, snapshot_version=args.at_version,
                            snapshot_time=args.at_time)
    except PipelineError as exc:
        if args.at_version is not None or args.at_time:
            raise ConfigError(
                f"Cannot open the lake at {_at(args)}: {str(exc).splitlines()[0]}",
                "List the snapshots that still exist with --snapshots; older ones were expired "
                "by maintenance (see RETENTION).") from None
        raise


def _at(args: argparse.Namespace) -> str:
    return f"version {args.at_version}" if args.at_version is not None else f"time {args.at_time}"


def sql_texts(args: argparse.Namespace) -> list[str]:
    texts = list(args.sql or [])
    for name in args.sql_file or []:
        path = Path(name)
        if not path.exists():
            raise ConfigError(f"SQL file {name} does not exist.",
                              "Named analysis queries live in sql/analysis/.")
        texts.append(path.read_text())
    return texts


def render_table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    """An aligned text table with a header line."""
    cells = [[_cell(r[c]) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, dict | list):
        return simplejson.dumps(value, use_decimal=True)
    return str(value)


def print_result(result: SessionResult, as_json: bool, info: dict[str, Any] | None) -> None:
    if as_json:
        payload = {"status": "error" if result.error else "ok",
                   "result": {"command_count": len(result.commands),
                              "commands": [c.as_dict() for c in result.commands]},
                   "catalog_info": info}
        if result.error:
            payload["error"] = result.error
        print(dumps(payload))
        return
    for command in result.commands:
        if command.columns is not None:
            print(render_table(command.columns, command.rows or []))
            more = " (more not shown; use --limit or --json)" if command.truncated else ""
            print(f"({command.row_count} row{'s' if command.row_count != 1 else ''}){more}\n")
        else:
            print(f"ok ({command.affected_rows} row(s) affected)\n")
    if result.error:
        print(f"error in command {result.error['command_index']}: {result.error['message']}",
              file=sys.stderr)


def run_sql(args: argparse.Namespace, settings: Settings) -> tuple[bool, str]:
    texts = sql_texts(args)
    params = parse_params(args.param or [])
    resolved = services.resolve(settings)
    con = open_session(resolved, args)
    try:
        limit = args.limit if args.limit is not None else (None if args.json else HUMAN_ROW_LIMIT)
        result = run_session(con, texts, params, limit)
        info = catalog_info(con, resolved.lake_name) if args.json else None
    finally:
        con.close()
    print_result(result, args.json, info)
    if result.error:
        return False, f"Failed: command {result.error['command_index']} did not run: " \
                      f"{result.error['message'].splitlines()[0]}"
    at = f" at {_at(args)}" if args.at_version is not None or args.at_time else ""
    return True, f"Ran {len(result.commands)} command(s){at}" + ("" if args.write else " (read-only).")


def run_snapshots(args: argparse.Namespace, settings: Settings) -> tuple[bool, str]:
    args.sql = [f"SELECT snapshot_id, snapshot_time, schema_version, changes, author, commit_message, "
                f"commit_extra_info FROM {settings.lake_name}.snapshots() ORDER BY snapshot_id"]
    args.sql_file = []
    ok, _ = run_sql(args, settings)
    return ok, "Snapshots listed." if ok else "Failed to list snapshots."


def run_changes(args: argparse.Namespace, settings: Settings) -> tuple[bool, str]:
    start, end = args.changes
    schema, _, table = (args.table or f"main.{settings.lake_table}").rpartition(".")
    bound = lambda v: v if v.lstrip("-").isdigit() else f"TIMESTAMPTZ '{v}'"  # noqa: E731
    args.sql = [f"SELECT * FROM ducklake_table_changes('{settings.lake_name}', '{schema or 'main'}', "
                f"'{table}', {bound(start)}, {bound(end)}) ORDER BY snapshot_id, rowid"]
    args.sql_file = []
    ok, _ = run_sql(args, settings)
    return ok, (f"Changes to {schema or 'main'}.{table} between {start} and {end} listed." if ok
                else "Failed to list changes.")
