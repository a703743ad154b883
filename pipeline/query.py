"""Ad-hoc SQL against the lake: run statements in order, collect results JSON-safely.

Pure helpers (value conversion, parameter binding, result shaping) sit beside the one
function that executes; the CLI (``pipeline/analysis.py``) only parses and prints.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import random
import re
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import duckdb

from pipeline.errors import ConfigError

DML = {"INSERT", "UPDATE", "DELETE"}
_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
CONFLICT_MARKERS = ("conflict", "Transaction conflict", "could not serialize", "concurrent")
MAX_CONFLICT_RETRIES = 20


def json_safe(value: Any, type_name: str = "") -> Any:
    """A value JSON can carry without loss: ISO timestamps, exact decimals, JSON as objects."""
    if value is None or isinstance(value, bool | int | str) and not type_name.startswith("JSON"):
        return value
    if type_name.startswith("JSON") and isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return value  # written as an exact JSON number by simplejson(use_decimal=True)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return str(value)


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """``["version=3", "user=user_1"]`` -> ``{"version": 3, "user": "user_1"}``."""
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ConfigError(f"--param {pair!r} is not name=value.", "Example: --param version=3")
        params[name] = int(raw) if re.fullmatch(r"-?\d+", raw) else raw
    return params


def bind(statement: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters ``statement`` uses (``$name``); a missing one is a clear error."""
    names = dict.fromkeys(_PARAM.findall(_strip_strings(statement)))
    missing = [n for n in names if n not in params]
    if missing:
        raise ConfigError(f"The SQL uses ${missing[0]}, which was not given.",
                          f"Add --param {missing[0]}=VALUE.")
    return {n: params[n] for n in names}


_LITERALS_AND_COMMENTS = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|/\*.*?\*/""", re.S)


def _strip_strings(sql: str) -> str:
    """Blank out string literals, quoted identifiers and comments (leftmost token wins, so an
    apostrophe inside a comment or ``--`` inside a string is handled)."""
    return _LITERALS_AND_COMMENTS.sub(" ", sql)


@dataclass
class CommandResult:
    command_index: int
    row_count: int | None = None
    columns: list[str] | None = None
    rows: list[dict[str, Any]] | None = None
    affected_rows: int | None = None
    status: str | None = None
    truncated: bool = False

    def as_dict(self) -> dict[str, Any]:
        if self.columns is not None:
            out = {"command_index": self.command_index, "row_count": self.row_count,
                   "columns": self.columns, "rows": self.rows}
            if self.truncated:
                out["truncated"] = True
            return out
        return {"command_index": self.command_index, "affected_rows": self.affected_rows,
                "status": self.status}


@dataclass
class SessionResult:
    commands: list[CommandResult] = field(default_factory=list)
    error: dict[str, Any] | None = None


def _is_conflict(exc: duckdb.Error) -> bool:
    text = str(exc)
    return isinstance(exc, duckdb.TransactionException) or any(m in text for m in CONFLICT_MARKERS)


def execute_one(con: duckdb.DuckDBPyConnection, index: int, statement: duckdb.Statement,
                params: dict[str, Any], limit: int | None, *, retry: bool = True) -> CommandResult:
    """Run one statement. In auto-commit mode a statement that lost a commit race with
    another writer did not commit, so it is retried (DuckLake already retried the commit)."""
    for attempt in range(MAX_CONFLICT_RETRIES + 1):
        try:
            cursor = con.execute(statement.query, bind(statement.query, params))
            break
        except duckdb.Error as exc:
            if not retry or attempt == MAX_CONFLICT_RETRIES or not _is_conflict(exc):
                raise
            time.sleep(min(2.0, 0.05 * 2 ** attempt) * random.uniform(0.5, 1.5))
    kind = statement.type.name
    if kind in DML:
        return CommandResult(index, affected_rows=int(cursor.fetchone()[0]), status="ok")
    if cursor.description is None or (kind != "SELECT" and [d[0] for d in cursor.description] == ["Count"]):
        if cursor.description is not None:
            cursor.fetchall()
        return CommandResult(index, affected_rows=0, status="ok")
    columns = [d[0] for d in cursor.description]
    types = [str(d[1]) for d in cursor.description]
    all_rows = cursor.fetchall()
    shown = all_rows if limit is None else all_rows[:limit]
    rows = [{c: json_safe(v, t) for c, v, t in zip(columns, row, types, strict=True)} for row in shown]
    return CommandResult(index, row_count=len(all_rows), columns=columns, rows=rows,
                         truncated=len(shown) < len(all_rows))


def run_session(con: duckdb.DuckDBPyConnection, texts: list[str], params: dict[str, Any],
                limit: int | None) -> SessionResult:
    """Run every statement of ``texts`` in order; stop at the first failure."""
    result = SessionResult()
    index, in_transaction = 0, False
    for text in texts:
        try:
            statements = con.extract_statements(text)
        except duckdb.Error as exc:
            result.error = {"command_index": index, "message": str(exc), "sql": text.strip()[:500]}
            return result
        for statement in statements:
            if statement.type.name == "TRANSACTION":
                word = statement.query.strip().split()[0].upper()
                in_transaction = word in ("BEGIN", "START")
            try:
                result.commands.append(execute_one(con, index, statement, params, limit,
                                                   retry=not in_transaction))
            except (duckdb.Error, ConfigError) as exc:
                result.error = {"command_index": index, "message": str(exc),
                                "sql": statement.query.strip()[:500]}
                return result
            index += 1
    return result


def catalog_info(con: duckdb.DuckDBPyConnection, lake_name: str) -> dict[str, Any]:
    """Lake name, true snapshot count, the latest snapshot and the tables with their files."""
    count = con.execute(f"SELECT count(*) FROM {lake_name}.snapshots()").fetchone()[0]
    cursor = con.execute(f"SELECT * FROM {lake_name}.snapshots() ORDER BY snapshot_id DESC LIMIT 1")
    columns = [d[0] for d in cursor.description]
    latest = cursor.fetchone()
    tables = con.execute(
        "SELECT t.schema_name, t.table_name, coalesce(i.file_count, 0), coalesce(i.file_size_bytes, 0) "
        "FROM duckdb_tables() t LEFT JOIN ducklake_table_info(?) i ON i.table_name = t.table_name "
        "WHERE t.database_name = ? ORDER BY 1, 2", [lake_name, lake_name]).fetchall()
    return {
        "catalog_name": lake_name,
        "snapshot_count": int(count),
        "latest_snapshot": ({c: json_safe(v) for c, v in zip(columns, latest, strict=True)}
                            if latest else None),
        "table_count": len(tables),
        "tables": [{"schema": s, "name": n, "data_files": int(f), "data_bytes": int(b)}
                   for s, n, f, b in tables],
    }
