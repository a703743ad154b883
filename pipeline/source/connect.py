"""Connect to the source Postgres; driver errors become our transient/terminal types."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from pipeline.errors import SourceUnavailable, service_error
from pipeline.settings.pgdsn import PgDsn


@contextmanager
def connect(dsn: PgDsn, *, autocommit: bool = True) -> Iterator[psycopg.Connection]:
    """A psycopg connection; an unreachable server becomes :class:`SourceUnavailable`.

    The session runs in the source's time zone (``SOURCE_TIMEZONE``, else the database's own
    TimeZone), as every reader's does: a ``timestamp without time zone`` value is wall-clock time
    there, so comparing it with an instant, or casting it to ``timestamptz``, gives the instant
    Postgres itself means by it. Values read back are instants (aware datetimes).

    Text comes back as UTF-8 whatever the database's encoding: a SQL_ASCII database (initdb
    without a UTF-8 locale) otherwise hands psycopg bytes, and every check that reads text
    (a column default, a name) failed with "a bytes-like object is required"."""
    try:
        conn = psycopg.connect(dsn.conninfo(), autocommit=autocommit, connect_timeout=10,
                               client_encoding="UTF8")
    except psycopg.OperationalError as exc:
        hint = "Check SOURCE_PG_DSN (host, port, user, password, dbname) and that the server runs."
        raise service_error(exc, f"Cannot connect to the source Postgres at {dsn.masked()}",
                            unavailable=SourceUnavailable, transient_hint=hint,
                            terminal_hint=hint) from None
    try:
        yield conn
        if not conn.autocommit:
            conn.commit()
    except psycopg.OperationalError as exc:
        # the server went away while we used it (restart, network cut): say so, plainly
        with contextlib.suppress(psycopg.Error):
            conn.rollback()
        raise service_error(exc, f"Lost the source Postgres at {dsn.masked()}",
                            unavailable=SourceUnavailable,
                            transient_hint="Check that the source runs; the next run retries it.",
                            terminal_hint="Check SOURCE_PG_DSN and the source's logs.") from None
    except BaseException:
        with contextlib.suppress(psycopg.Error):  # a dead connection must not mask the real error
            conn.rollback()
        raise
    finally:
        with contextlib.suppress(psycopg.Error):
            conn.close()
