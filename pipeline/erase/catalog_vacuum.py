"""Step 5 of an erasure, the last (:mod:`pipeline.erase.erasure`): the catalog database's pages
scrubbed of the erased value — every DuckLake table rewritten (VACUUM FULL), its planner
statistics too where the catalog role may, an SQLite file vacuumed — or the receipt says what is
left and the command that does it."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import psycopg

from pipeline.settings import ResolvedSettings

log = logging.getLogger(__name__)
VACUUM_LOCK_TIMEOUT = 10  # seconds a catalog table's VACUUM FULL waits for readers to let go


# the catalog's tables: every one DuckLake writes. Those holding values of rows (inlined rows, min/max
# statistics) are not the only ones an erasure must rewrite: each of its commits writes new versions of
# snapshot, file and statistics rows, and VACUUM FULL is what leaves no dead version of any behind
_CATALOG_TABLES = "ducklake\\_%"
# Postgres's planner statistics of every table, one catalog of the database: ANALYZE replaces a row of
# it, leaving the old one (values of the analysed table among them) as a dead version until VACUUM FULL
_STATISTICS = "pg_catalog.pg_statistic"


def vacuum_catalog(settings: ResolvedSettings) -> str:
    """Step 5, the last, after every commit of the erasure: a Postgres catalog keeps a deleted row's
    bytes in its table's pages, and a replaced row's old version, until VACUUM FULL rewrites the
    table, and a value in its planner statistics until ANALYZE (whose old statistics stay in
    ``pg_statistic`` until it is rewritten too: only a superuser may); an SQLite file keeps them in
    free pages until VACUUM (a DuckDB file catalog reuses its free blocks: docs/erasure.md).
    VACUUM FULL waits for every reader of the table: one that keeps a transaction open (another
    process's lake session) would hold it, and every query queued behind it, so past
    :data:`VACUUM_LOCK_TIMEOUT` that table gets a plain VACUUM. Returns what was done, as the receipt
    records it: ``full``, or what is left to do, why, and the command (said in the log too)."""
    catalog = settings.catalog
    if catalog.pg is None:
        if catalog.kind == "sqlite" and catalog.path is not None:
            _vacuum_sqlite(catalog.path)
            return "full"
        return "none: a DuckDB file catalog reuses its free blocks"
    left: list[str] = []
    with psycopg.connect(catalog.pg.conninfo(), autocommit=True) as conn:
        skipped: list[str] = []
        conn.add_notice_handler(lambda notice: skipped.append(notice.message_primary or ""))
        conn.execute(f"SET lock_timeout = '{VACUUM_LOCK_TIMEOUT}s'")
        tables = [t for (t,) in conn.execute(
            "SELECT format('%%I.%%I', schemaname, tablename) FROM pg_tables WHERE tablename LIKE %s "
            "ORDER BY 1", [_CATALOG_TABLES]).fetchall()]
        for table in tables:
            skipped.clear()
            try:
                conn.execute(f"VACUUM (FULL, ANALYZE) {table}")
                _forget_statistics_if_empty(conn, table)
            except psycopg.errors.LockNotAvailable:
                left.append(_vacuum_held(conn, table))
                continue
            except psycopg.errors.InsufficientPrivilege:  # retyping a column is the owner's
                skipped.append("skipping: not the owner")
            if any("skipping" in message for message in skipped):  # not its owner: Postgres only warns
                log.warning("the catalog role may not VACUUM FULL %s (it does not own it): its pages may "
                            "keep erased bytes; run VACUUM (FULL, ANALYZE) %s as its owner", table, table)
                left.append(f"{table} (not owned by the catalog role: VACUUM (FULL, ANALYZE) {table} as its "
                            "owner)")
        left += _vacuum_statistics(conn)
    if left:
        return "left to do, when idle: " + "; ".join(left)
    return "full"


# Run in a process of its own: this one's DuckDB holds the file open through its own copy of SQLite,
# and two copies in one process do not see each other's POSIX locks (closing one's descriptor drops
# the other's: sqlite.org/howtocorrupt.html, 2.2): a VACUUM beside it read the file as "malformed"
_SQLITE_VACUUM = ("import sqlite3, sys\n"
                  "conn = sqlite3.connect(sys.argv[1], timeout=float(sys.argv[2]), isolation_level=None)\n"
                  "conn.execute('VACUUM')\n"
                  "conn.close()\n")


def _vacuum_sqlite(path: Path) -> None:
    """VACUUM an SQLite catalog file from another process, waiting up to
    :data:`VACUUM_LOCK_TIMEOUT` for its writers; its error, if any, raised with SQLite's words."""
    done = subprocess.run([sys.executable, "-c", _SQLITE_VACUUM, str(path), str(VACUUM_LOCK_TIMEOUT)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
        raise RuntimeError(f"VACUUM of the SQLite catalog {path} failed: {said[-1]}")


def _vacuum_statistics(conn: psycopg.Connection) -> list[str]:
    """Rewrite ``pg_statistic`` (the old statistics ANALYZE replaced, values among them), where the
    catalog role may: a superuser. Returns what is left to do ([] when done)."""
    [(superuser, database)] = conn.execute(
        "SELECT rolsuper, current_database() FROM pg_roles WHERE rolname = current_user").fetchall()
    if superuser:
        try:
            conn.execute(f"VACUUM FULL {_STATISTICS}")
            return []
        except psycopg.errors.LockNotAvailable:
            pass
    command = f"VACUUM FULL {_STATISTICS}"
    log.warning("the catalog database's old planner statistics may keep erased values until a superuser "
                "runs %s in the database %s (docs/erasure.md)", command, database)
    return [f"{_STATISTICS} (only a superuser may rewrite it: {command} in the database {database})"]


def _forget_statistics_if_empty(conn: psycopg.Connection, table: str) -> None:
    """ANALYZE of a table left empty (inlined rows flushed) keeps its old statistics, values of its
    old rows among them; retyping a column to its own type makes Postgres forget them (on an empty
    table nothing is rewritten; privileges and the table stay as they were)."""
    if conn.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone() != (False,):
        return
    columns = conn.execute(  # pg_stats: pg_statistic itself is the superuser's
        "SELECT quote_ident(a.attname), format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = a.attname "
        "WHERE a.attrelid = %s::regclass", [table]).fetchall()
    if columns:
        conn.execute(f"ALTER TABLE {table} " + ", ".join(f"ALTER COLUMN {name} TYPE {kind}"
                                                          for name, kind in columns))


def _vacuum_held(conn: psycopg.Connection, table: str) -> str:
    holders = conn.execute(
        "SELECT DISTINCT a.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
        "WHERE l.relation = %s::regclass AND a.pid <> pg_backend_pid()", [table]).fetchall()
    held_by = ", ".join(f"pid {pid} ({app or 'no name'})" for pid, app in holders) or "a reader"
    log.warning("the catalog table %s is held open by %s: vacuumed without FULL, so its pages may keep "
                "erased bytes until VACUUM (FULL, ANALYZE) %s runs (docs/erasure.md)", table, held_by, table)
    conn.execute(f"VACUUM (ANALYZE) {table}")
    return f"{table} (held open by {held_by})"
