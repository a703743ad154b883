"""Ad-hoc SQL against the lake: run statements in order, collect results JSON-safely.

Pure helpers (value conversion, parameter binding, result shaping) sit beside the one
function that executes; the CLI (:mod:`pipeline.cli.analysis`) only parses and prints.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import random
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import duckdb

from pipeline import actions
from pipeline.errors import CatalogUnavailable, ConfigError, PipelineError, first_line, is_transient
from pipeline.lake import ownership
from pipeline.lake.connect import connect, not_created
from pipeline.lake.rows import json_safe
from pipeline.lake.session import Lake
from pipeline.settings import ResolvedSettings
from pipeline.settings.catalog import CatalogSpec
from pipeline.settings.pgdsn import PgDsn
from pipeline.sql_session import (
    arrow_grouping,
    builtin_functions,
    catalog_reader,
    statement_judge,
    typed_rewrite,
)
from pipeline.sql_session.sandbox import refused_hint, refused_message, sandbox_statements
from pipeline.sql_session.typed_rewrite import Params, SqlTree
from pipeline.sqltext import quote_ident, quote_literal

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)
DML = {"INSERT", "UPDATE", "DELETE"}
_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
CONFLICT_MARKERS = ("conflict", "Transaction conflict", "could not serialize", "concurrent")
MAX_CONFLICT_RETRIES = 20


def parse_params(pairs: list[str]) -> dict[str, object]:
    """``["version=3", "user=user_1"]`` -> ``{"version": 3, "user": "user_1"}``."""
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ConfigError(f"{actions.PARAM} {pair!r} is not name=value.",
                              f"Example: {actions.PARAM} version=3")
        params[name] = int(raw) if re.fullmatch(r"-?\d+", raw) else raw
    return params


def bind(statement: str, params: dict[str, object]) -> dict[str, object]:
    """The parameters ``statement`` uses (``$name``); a missing one is a clear error."""
    names = dict.fromkeys(_PARAM.findall(_strip_strings(statement)))
    missing = [n for n in names if n not in params]
    if missing:
        raise ConfigError(f"The SQL uses ${missing[0]}, which was not given: "
                          f"add {actions.PARAM} {missing[0]}=VALUE.")
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

    def as_dict(self) -> dict[str, object]:
        if self.columns is not None:
            out: dict[str, object] = {"command_index": self.command_index, "row_count": self.row_count,
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
                params: dict[str, object], limit: int | None, *, retry: bool = True,
                served: str | None = None) -> CommandResult:
    """Run one statement (as ``served`` when given: its form reading typed payload columns, or with
    an arrow regrouped). In auto-commit mode a statement that lost a commit race with another
    writer did not commit, so it is retried (DuckLake already retried the commit)."""
    query = served or statement.query
    for attempt in range(MAX_CONFLICT_RETRIES + 1):
        try:
            cursor = con.execute(query, bind(statement.query, params))
            break
        except duckdb.Error as exc:
            if not retry or attempt == MAX_CONFLICT_RETRIES or not _is_conflict(exc):
                raise
            time.sleep(min(2.0, 0.05 * 2 ** attempt) * random.uniform(0.5, 1.5))
    kind = statement.type.name
    if kind in DML or (kind != "SELECT" and cursor.description is not None
                       and [d[0] for d in cursor.description] == ["Count"]):
        # INSERT/UPDATE/DELETE, and CREATE TABLE … AS / MERGE, which report their rows the same way
        [count] = cursor.fetchone() or (0,)
        return CommandResult(index, affected_rows=int(count or 0), status="ok")
    if cursor.description is None:
        return CommandResult(index, affected_rows=0, status="ok")
    columns = [d[0] for d in cursor.description]
    types = [str(d[1]) for d in cursor.description]
    shown, count = _fetch(cursor, limit)
    rows = [{c: json_safe(v, t) for c, v, t in zip(columns, row, types, strict=True)} for row in shown]
    return CommandResult(index, row_count=count, columns=columns, rows=rows, truncated=len(shown) < count)


COUNT_CHUNK = 100_000


def _fetch(cursor: duckdb.DuckDBPyConnection, limit: int | None) -> tuple[list[tuple[Any, ...]], int]:
    """The first ``limit`` rows (all when None) and the true row count: rows past the limit are
    counted a chunk at a time and dropped, so memory holds the shown rows and one chunk."""
    if limit is None:
        rows = cursor.fetchall()
        return rows, len(rows)
    shown = cursor.fetchmany(limit) if limit > 0 else []
    count = len(shown)
    while chunk := cursor.fetchmany(COUNT_CHUNK):
        count += len(chunk)
    return shown, count


class Deadline:
    """Interrupts a session's running statement once ``seconds`` have passed (DuckDB has no
    statement timeout of its own); :attr:`passed` tells a timeout from a Ctrl-C afterwards."""

    def __init__(self, con: duckdb.DuckDBPyConnection, seconds: float | None) -> None:
        self.seconds, self.passed = seconds, False
        self._timer = threading.Timer(seconds, self._fire, args=(con,)) if seconds else None
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()

    def _fire(self, con: duckdb.DuckDBPyConnection) -> None:
        self.passed = True
        con.interrupt()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def run_session(con: duckdb.DuckDBPyConnection, texts: list[str], params: dict[str, object],
                limit: int | None, *, write: bool = False, timeout: float | None = None) -> SessionResult:
    """Run every statement of ``texts`` in order; stop at the first failure.

    Every text is parsed, and every statement judged against the session's trust boundary,
    before the first one runs: a refused or unparsable statement anywhere means nothing ran.
    ``timeout`` (seconds) bounds the whole session: the statement running then is stopped and
    the session ends with an error saying so. A Ctrl-C stops it too, as KeyboardInterrupt.
    """
    result = SessionResult()
    statements: list[duckdb.Statement] = []
    for text in texts:
        try:
            statements += con.extract_statements(text)
        except duckdb.Error as exc:
            result.error = {"command_index": len(statements), "message": str(exc), "sql": text.strip()[:500]}
            return result
    # every statement is judged before the first runs: the default catalog is still the lake (open_session)
    [[lake, memory]] = con.execute("SELECT current_database(), current_setting('memory_limit')").fetchall()
    served: dict[int, str] = {}
    for index, statement in enumerate(statements):
        verdict = Judged() if write else judged(con, statement, lake)
        if verdict.refused:
            result.error = {"command_index": index, "message": verdict.refused,
                            "sql": statement.query.strip()[:500]}
            return result
        form = served_form(con, verdict.tree, lake, params) if verdict.tree is not None else None
        if run_as := form or verdict.regrouped:
            served[index] = run_as
    in_transaction = False
    deadline = Deadline(con, timeout)
    try:
        for index, statement in enumerate(statements):
            if statement.type.name == "TRANSACTION":
                word = statement.query.strip().split()[0].upper()
                in_transaction = word in ("BEGIN", "START")
            try:
                result.commands.append(execute_one(con, index, statement, params, limit,
                                                   retry=not in_transaction, served=served.get(index)))
            except (duckdb.InterruptException, RuntimeError) as exc:
                # DuckDB stops a statement on con.interrupt() (the deadline) with InterruptException,
                # and on Ctrl-C with RuntimeError("Query interrupted") caused by KeyboardInterrupt
                if not isinstance(exc, duckdb.InterruptException) and \
                        not isinstance(exc.__cause__, KeyboardInterrupt):
                    raise
                if not deadline.passed:
                    con.interrupt()  # Python saw the Ctrl-C; make sure DuckDB's workers stop too
                    raise KeyboardInterrupt from None
                result.error = {"command_index": index, "sql": statement.query.strip()[:500],
                                "message": f"Stopped after {actions.TIMEOUT} {timeout:g}s: the session "
                                           f"ran longer. Give it more time with {actions.TIMEOUT} 30m "
                                           f"(or {actions.TIMEOUT} 0 for none)."}
                return result
            except (duckdb.Error, ConfigError) as exc:
                result.error = {"command_index": index, "message": _explain(exc, write, memory),
                                "sql": statement.query.strip()[:500]}
                return result
    finally:
        deadline.cancel()
    index = len(statements)
    if in_transaction:
        # a BEGIN without COMMIT would be rolled back silently when the session closes
        con.execute("ROLLBACK")
        result.error = {"command_index": max(index - 1, 0), "sql": "",
                        "message": "The session ended inside a transaction (BEGIN without COMMIT); it was "
                                   "rolled back and nothing it wrote was kept. "
                                   f"End it with {actions.SQL} COMMIT."}
    return result


@functools.cache
def allowed_scalars() -> frozenset[str]:
    """DuckDB's own scalar, aggregate and macro functions (extensions' functions, such as
    postgres_execute, are not among them): as written down for this DuckDB version, else asked."""
    if duckdb.__version__ == builtin_functions.DUCKDB_VERSION:
        return builtin_functions.NAMES
    return builtin_functions.listed()


def _names(con: duckdb.DuckDBPyConnection, lake: str) -> tuple[frozenset[str], frozenset[str]]:
    """The session's catalogs and the lake's schemas, lower-cased: what a USE may resolve to."""
    catalogs = frozenset(r[0].lower() for r in
                         con.execute("SELECT database_name FROM duckdb_databases()").fetchall())
    schemas = frozenset(r[0].lower() for r in con.execute(
        f"SELECT schema_name FROM duckdb_schemas() WHERE database_name = {quote_literal(lake)}").fetchall())
    return catalogs, schemas


def parsed_tree(con: duckdb.DuckDBPyConnection, text: str) -> SqlTree:
    """DuckDB's own parse tree of ``text`` (``json_serialize_sql``; a text it cannot parse gives a tree
    saying ``"error": true``)."""
    # the statement as a literal, not a parameter: DuckDB's binding of a Python parameter imports
    # pandas (0.2 s of a 0.8 s --sql start)
    [[tree]] = con.execute(f"SELECT json_serialize_sql({quote_literal(text)})").fetchall()
    return cast(SqlTree, json.loads(tree))


@dataclass(frozen=True)
class Judged:
    """A statement judged: why it may not run (None: it may), the tree of the query that runs, and
    that query's text when it is not the statement as written (an arrow regrouped)."""

    refused: str | None = None
    tree: SqlTree | None = None
    regrouped: str | None = None


def judged(con: duckdb.DuckDBPyConnection, statement: duckdb.Statement, lake: str) -> Judged:
    """Whether ``statement`` may run in a read-only session, judged on the tree DuckDB itself parses
    (:mod:`pipeline.sql_session.statement_judge`) of what will run: the statement, or, where DuckDB
    read an ``->>`` with a boolean left operand, the statement with it regrouped
    (:mod:`pipeline.sql_session.arrow_grouping`)."""
    verdict = statement_judge.classify(statement.type.name, statement.query)
    if verdict.refused:
        return Judged(refused_message(statement.query, verdict.refused))
    if verdict.use is not None:
        reason = statement_judge.use_refusal(verdict.use, lake, *_names(con, lake))
        return Judged(refused_message(statement.query, reason) if reason else None)
    if verdict.query is None:
        return Judged()
    if "\x00" in verdict.query:  # a literal ends at a NUL: its tree would be of another text
        return Judged(refused_message(statement.query.replace("\x00", "\\0"), "it holds a NUL character"))
    parse = functools.partial(parsed_tree, con)
    tree, regrouped = parse(verdict.query), None
    if verdict.query == statement.query and (grouped := arrow_grouping.regrouped(verdict.query, tree, parse)):
        regrouped, tree = grouped
        log.info("read %s as %s: DuckDB groups an arrow with everything left of it",
                 " ".join(statement.query.split())[:200], " ".join(regrouped.split())[:200])
    reason = statement_judge.refusal(tree, allowed_scalars())
    if reason:
        return Judged(refused_message(statement.query, reason))
    return Judged(tree=tree, regrouped=regrouped)


def served_form(con: duckdb.DuckDBPyConnection, tree: SqlTree, lake: str,
                params: Params = None) -> str | None:
    """The query of ``tree`` reading typed payload columns where its JSON filters name a complete
    typed key (:mod:`.typed_rewrite`), or None to run it as written. A failure to work that out
    runs it as written: the rewrite only ever saves work."""
    try:
        found = typed_rewrite.served_query(con, tree, lake, params)
    except duckdb.Error as exc:
        log.debug("query run as written (typed columns not consulted: %s)", first_line(exc))
        return None
    if found is None:
        return None
    text, keys = found
    log.info("details->>%s served from typed column(s)", ", details->>".join(f"'{key}'" for key in keys))
    return text


def _explain(exc: Exception, write: bool, memory: str) -> str:
    """DuckDB's words, with what the session's boundary means for the user."""
    text = str(exc)
    if isinstance(exc, duckdb.PermissionException) or "disabled by configuration" in text \
            or "disabled through configuration" in text or "configuration has been locked" in text:
        where = "may change the lake, but nothing outside its data path" if write else "reads the lake only"
        return f"{text.splitlines()[0]} (an {actions.SQL} session {where})"
    if not write and "attached in read-only mode" in text:
        return f"{text.splitlines()[0]} ({refused_hint()})"
    if isinstance(exc, duckdb.OutOfMemoryException):
        return (f"{text.splitlines()[0]} (the session may use {memory} (SQL_MEMORY) and spilled what it "
                f"could to its private temp folder; give this query more with {actions.MEMORY} 8GB, or "
                "make it collect less)")
    return text


def catalog_role(catalog: CatalogSpec, lake_name: str) -> PgDsn | None:
    """The role a read-only session reaches a Postgres ``catalog`` as: its reader (the embedded
    default's made ready here), or None with a warning that says what the session falls back to."""
    if catalog.pg is None:
        return None  # a catalog file: DuckLake attaches it read-only itself
    if catalog.embedded and not catalog_reader.ensure_embedded(catalog, lake_name):
        # no schema yet, so no reader role: its login would be refused
        raise not_created(lake_name, catalog)
    if catalog.reader is None:
        log.warning("this read-only session reaches the catalog as %s, a role that can write it: only the "
                    "statement check keeps it read-only. Set DUCKLAKE_CATALOG_READER to a role that can only "
                    "read (%s prints the GRANTs).", catalog.pg.user, actions.DOCTOR)
    return catalog.reader


def _private_temp_dir() -> str:
    """An empty folder only this user can enter, removed when the process ends."""
    made = tempfile.mkdtemp(prefix="event-lake-sql-")
    atexit.register(shutil.rmtree, made, ignore_errors=True)
    return made


def describe_at(at_version: int | None, at_time: str | None) -> str:
    return f"version {at_version}" if at_version is not None else f"time {at_time}"


def open_session(settings: ResolvedSettings, *, write: bool = False, at_version: int | None = None,
                 at_time: str | None = None) -> duckdb.DuckDBPyConnection:
    """The lake attached read-only (unless ``write``), at a snapshot version or time if given."""
    time_travel = at_version is not None or at_time is not None
    if write and time_travel:
        raise ConfigError(f"{actions.WRITE} cannot be combined with "
                          f"{actions.AT_VERSION}/{actions.AT_TIME}.",
                          f"Time travel is read-only; drop {actions.WRITE} or the snapshot option.")
    try:
        con = connect(settings, read_only=not write, snapshot_version=at_version, snapshot_time=at_time,
                      catalog_role=None if write else catalog_role(settings.catalog, settings.lake_name))
    except PipelineError as exc:
        if time_travel and "No snapshot found" in str(exc):
            raise ConfigError(f"The lake has no snapshot at {describe_at(at_version, at_time)}: that is "
                              "before its first snapshot (or past its last version).",
                              f"List the snapshots with {actions.SNAPSHOTS} and pick a version or time "
                              "among them."
                              ) from None
        if time_travel:
            raise ConfigError(
                f"Cannot open the lake at {describe_at(at_version, at_time)}: {first_line(exc)}",
                f"List the snapshots that still exist with {actions.SNAPSHOTS}; older ones were expired "
                "by maintenance (see RETENTION).") from None
        raise
    try:
        # the lake is the session's default catalog: unqualified names (events, CREATE TABLE sales,
        # snapshots(), table_changes('events', …)) resolve in it, whatever DUCKLAKE_NAME is
        con.execute(f"USE {quote_ident(settings.lake_name)}")
        if write:
            lake = Lake.of(con, settings)
            ownership.claim(lake)  # a write session never writes into another lake's folder
            lake.data_folder.make(exist_ok=True)  # the sandbox lets DuckDB write below it, not create it
        catalog = settings.catalog
        for statement in sandbox_statements(
                data_path=settings.data_path, catalog_file=str(catalog.path) if catalog.path else None,
                catalog_secret=f"{settings.lake_name}_catalog" if catalog.pg is not None else None,
                write=write, temp_dir=_private_temp_dir(), memory_limit=settings.sql_memory):
            con.execute(statement)
    except BaseException:
        con.close()
        raise
    return con


def arrow_query(settings: ResolvedSettings, text: str,
                params: list[object] | dict[str, object] | None = None, *, write: bool = False,
                at_version: int | None = None, at_time: str | None = None) -> pa.Table:
    """One statement against the lake, as an Arrow table (the Python API's :meth:`Pipeline.sql`):
    the same session as ``--sql`` (the lake as default catalog, read-only and judged unless
    ``write``, at a snapshot when asked)."""
    con = open_session(settings, write=write, at_version=at_version, at_time=at_time)
    try:
        try:
            statements = con.extract_statements(text)
        except duckdb.Error as exc:  # said as the CLI says it (a NUL in the text raised DuckDB's own error)
            raise ConfigError(f"The SQL cannot be parsed: {first_line(exc)}", "Fix the statement.") from None
        if len(statements) != 1:
            raise ConfigError(f"One statement at a time: got {len(statements)}.",
                              "Call sql() once per statement.")
        [statement] = statements
        [[lake]] = con.execute("SELECT current_database()").fetchall()
        verdict = Judged() if write else judged(con, statement, lake)
        if verdict.refused:
            raise ConfigError(verdict.refused, "Pass write=True for a statement that changes the lake.")
        query = ((verdict.tree is not None and served_form(con, verdict.tree, lake, params))
                 or verdict.regrouped or statement.query)
        try:
            relation = con.execute(query, params) if params else con.execute(query)
            return relation.to_arrow_table()
        except duckdb.Error as exc:  # said as the CLI says it, a PipelineError with a hint
            if is_transient(exc):
                raise CatalogUnavailable(f"The lake's catalog went away during the query: {first_line(exc)}",
                                         "Check that the catalog database runs, then ask again.") from None
            raise ConfigError(f"The statement failed: {first_line(exc)}",
                              f"Fix the statement; {actions.SNAPSHOTS} lists the snapshots a version or time "
                              "must name.") from None
    finally:
        con.close()
