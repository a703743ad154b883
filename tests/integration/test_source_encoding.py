"""A source database in SQL_ASCII (what initdb makes without a UTF-8 locale, as a container's
Debian Postgres did in the stack tests): psycopg handed back bytes for text, and --status and
/metrics failed on every read with "a bytes-like object is required, not 'str'"."""

from __future__ import annotations

import secrets

import psycopg

from pipeline.ops.status import collect
from pipeline.settings import load_settings
from pipeline.settings.resolve import resolve
from tests.helpers import add_events


def test_a_sql_ascii_source_is_read_as_text(lake_env, pg_server):
    name = f"el_ascii_{secrets.token_hex(4)}"
    with psycopg.connect(pg_server.conninfo(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' "
                      "TEMPLATE template0")
    try:
        source = pg_server.conninfo().replace("dbname=postgres", f"dbname={name}")
        assert f"dbname={name}" in source
        settings = resolve(load_settings({**lake_env, "SOURCE_PG_DSN": source}))
        add_events(settings, 20, seed=401)
        status = collect(settings)  # reads the arrival column's default, among other text
        assert status.source_up and status.source_error is None, status
        assert status.source_rows_after_watermark == 20, status
    finally:
        with psycopg.connect(pg_server.conninfo(), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_a_latin1_source_with_text_keys_and_accents_is_proven_equal(lake_env, pg_server):
    """Found by the adversary: Postgres hashed a LATIN1 database's bytes and DuckDB UTF-8's, so
    text keys 'café' and 'naïve' were "missing" and "extra" for ever, and an accented column
    "changed": both sides hash UTF-8 now."""
    from pipeline.load.verify import compare
    from tests.helpers import run

    name = f"el_latin1_{secrets.token_hex(4)}"
    with psycopg.connect(pg_server.conninfo(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    try:
        source = pg_server.conninfo().replace("dbname=postgres", f"dbname={name}")
        settings = resolve(load_settings({**lake_env, "SOURCE_PG_DSN": source,
                                          "SOURCE_TABLES": "public.refunds:refunded_at:refund_ref"}))
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute("CREATE TABLE public.refunds (refund_ref text PRIMARY KEY, refunded_at timestamptz "
                          "NOT NULL DEFAULT now() - interval '1 minute', note text)")
            conn.execute("INSERT INTO public.refunds (refund_ref, note) VALUES ('café', 'crème brûlée'), "
                         "('naïve', 'Ørsted'), ('plain', 'plain')")
        assert run(settings, engine="dlt").rows_inserted == 3
        status = collect(settings)
        assert status.health.state == "healthy", status.health.reasons
        assert compare(settings).equal
    finally:
        with psycopg.connect(pg_server.conninfo(), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
