"""The role a read-only ``--sql`` session reads a Postgres catalog with.

DuckLake keeps its metadata connection open inside the session, with the credentials the
lake was attached with. Attached as the catalog's owner, that connection could delete the
lake's file list, run ``COPY … TO PROGRAM`` or hold the promotion lock whatever DuckDB
thinks of the statement that reached it. So a read-only session attaches the catalog as a
role that can do none of that: SELECT on the lake's metadata schema and nothing else, read-only
transactions by default, and no advisory locks in the catalog database. That is the first
of the session's two layers; the statement judge (:mod:`.statement_judge`) is the second.

The embedded default creates its own reader (trust auth on loopback, so no password); for
an external catalog the operator creates one from :func:`grants` (``doctor`` prints them)
and names it in ``DUCKLAKE_CATALOG_READER``.
"""

from __future__ import annotations

import contextlib

from pipeline.settings.catalog import EMBEDDED_READER, CatalogSpec
from pipeline.settings.pgdsn import PgDsn
from pipeline.sqltext import quote_ident

__all__ = ["EMBEDDED_READER", "can_write", "ensure_embedded", "grants", "setup_text"]

# every advisory-lock function: a reader holding the promotion lock would stall every load
_LOCK_FUNCTIONS = [f"{name}({args})" for name in (
    "pg_advisory_lock", "pg_advisory_lock_shared", "pg_try_advisory_lock", "pg_try_advisory_lock_shared",
    "pg_advisory_xact_lock", "pg_advisory_xact_lock_shared", "pg_try_advisory_xact_lock",
    "pg_try_advisory_xact_lock_shared") for args in ("bigint", "integer, integer")]


def grants(*, reader: str, writer: str, database: str, schema: str) -> list[str]:
    """The statements (pure) that make ``reader`` able to read the lake's catalog and nothing
    more, run by ``writer`` (the role DUCKLAKE_CATALOG logs in as, owner of the metadata)."""
    r, w, s, d = quote_ident(reader), quote_ident(writer), quote_ident(schema), quote_ident(database)
    locks = ", ".join(_LOCK_FUNCTIONS)
    return [
        f"ALTER ROLE {r} NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS",
        f"ALTER ROLE {r} IN DATABASE {d} SET default_transaction_read_only = on",
        f"GRANT CONNECT ON DATABASE {d} TO {r}",
        f"GRANT USAGE ON SCHEMA {s} TO {r}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {r}",
        # tables a later DuckLake version adds to the metadata schema
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {w} IN SCHEMA {s} GRANT SELECT ON TABLES TO {r}",
        f"REVOKE EXECUTE ON FUNCTION {locks} FROM PUBLIC",
        f"GRANT EXECUTE ON FUNCTION {locks} TO {w}",
    ]


def setup_text(catalog: CatalogSpec, schema: str) -> str:
    """What an operator runs (as the catalog's owner) to create a reader, for doctor and errors."""
    assert catalog.pg is not None
    statements = ["CREATE ROLE lake_reader LOGIN PASSWORD '<a password>'",
                  *grants(reader="lake_reader", writer=catalog.pg.user, database=catalog.pg.dbname,
                          schema=schema)]
    return ";\n".join(statements) + ";"


def ensure_embedded(catalog: CatalogSpec, schema: str) -> bool:
    """Create the embedded default's reader the first time a session needs it (the GRANTs run
    once per lake, not on every --sql); run as the embedded server's superuser. False when the
    lake is not created yet (no schema to grant on)."""
    assert catalog.pg is not None and catalog.reader is not None
    import psycopg  # only the embedded default's sessions and doctor connect: imported then (0.1 s)

    role = catalog.reader.user
    with psycopg.connect(catalog.pg.conninfo(), autocommit=True) as conn:
        [(has_schema, granted)] = conn.execute(
            "SELECT to_regnamespace(%(s)s::text) IS NOT NULL, CASE WHEN to_regnamespace(%(s)s::text) IS NULL "
            "  OR NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %(r)s) THEN false "
            "  ELSE has_schema_privilege(%(r)s, %(s)s, 'USAGE') END",
            {"s": schema, "r": role}).fetchall()
        if not has_schema or granted:
            return has_schema
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
            # another process may create it at the same moment
            with contextlib.suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
                conn.execute(f"CREATE ROLE {quote_ident(role)} LOGIN")
        for statement in grants(reader=role, writer=catalog.pg.user,
                                database=catalog.pg.dbname, schema=schema):
            conn.execute(statement)
    return True


def can_write(reader: PgDsn, schema: str) -> list[str]:
    """What ``reader`` can do beyond reading the catalog (empty when it is a true reader):
    asked of the server as that role, so doctor reports what a session would really hold."""
    import psycopg

    with psycopg.connect(reader.conninfo(), connect_timeout=10) as conn:
        row = conn.execute(
            "SELECT r.rolsuper, r.rolcreaterole, "
            "  EXISTS (SELECT 1 FROM pg_tables t WHERE t.schemaname = %(s)s AND "
            "          has_table_privilege(current_user, format('%%I.%%I', t.schemaname, t.tablename), "
            "                              'INSERT, UPDATE, DELETE, TRUNCATE')), "
            "  has_function_privilege(current_user, 'pg_advisory_lock(bigint)', 'EXECUTE'), "
            "  pg_has_role(current_user, 'pg_execute_server_program', 'USAGE'), "
            "  current_setting('default_transaction_read_only') = 'on' "
            "FROM pg_roles r WHERE r.rolname = current_user", {"s": schema}).fetchone()
    assert row is not None, "current_user has a pg_roles row"
    superuser, createrole, writes, locks, program, read_only = row
    problems = [what for what, bad in (("is a superuser", superuser), ("can create roles", createrole),
                                       ("can change the lake's metadata tables", writes),
                                       ("can take advisory locks (the promotion lock)", locks),
                                       ("can run server programs", program),
                                       ("does not default to read-only transactions", not read_only)) if bad]
    return problems
