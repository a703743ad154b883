"""Check before creating: a renamed column or an unwritable data path fails the run with the
value and the fix, before the catalog holds any lake table; after the fix the run loads."""

from __future__ import annotations

import psycopg
import pytest

from pipeline.settings import load_settings
from pipeline.settings.resolve import resolve
from tests.helpers import add_events, assert_lake_equals_source, data_snapshots, lake_query


def _catalog_tables(lake_env) -> int:
    with psycopg.connect(lake_env["DUCKLAKE_CATALOG"]) as conn:
        return conn.execute("SELECT count(*) FROM information_schema.tables "
                            "WHERE table_name LIKE 'ducklake%%'").fetchone()[0]


def test_a_renamed_source_column_is_named_and_nothing_is_created(settings, lake_env, cli):
    add_events(settings, 200, seed=61)
    dsn = resolve(settings).source_dsn
    with psycopg.connect(dsn.conninfo(), autocommit=True) as conn:
        conn.execute("ALTER TABLE public.events RENAME COLUMN event_timestamp TO occurred_at")
    failed = cli("--run", env=lake_env)
    output = failed.stdout + failed.stderr
    assert failed.returncode == 1, output
    assert "has no column event_timestamp" in output and "occurred_at" in output
    assert "Traceback" not in output
    assert _catalog_tables(lake_env) == 0  # the lake was not even created

    with psycopg.connect(dsn.conninfo(), autocommit=True) as conn:
        conn.execute("ALTER TABLE public.events RENAME COLUMN occurred_at TO event_timestamp")
        conn.execute("ALTER TABLE public.events ALTER COLUMN event_timestamp TYPE text")
    retyped = cli("--run", "--engine", "dlt", env=lake_env)
    assert retyped.returncode == 1 and "event_timestamp is text" in retyped.stderr, retyped.stderr

    with psycopg.connect(dsn.conninfo(), autocommit=True) as conn:
        conn.execute("ALTER TABLE public.events ALTER COLUMN event_timestamp TYPE timestamptz "
                     "USING event_timestamp::timestamptz")
        conn.execute("ALTER TABLE public.events ADD COLUMN tenant text DEFAULT 'acme'")
    fixed = cli("--run", "--engine", "dlt", env=lake_env)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert_lake_equals_source(settings, expected_rows=200)


def test_an_unwritable_data_path_fails_before_the_catalog_is_bound_to_it(lake_env, tmp_path, cli):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    env = {**lake_env, "DUCKLAKE_DATA_PATH": f"{blocker}/data/"}
    settings = load_settings(env)
    add_events(settings, 100, seed=62)
    failed = cli("--run", "--engine", "dlt", env=env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"DUCKLAKE_DATA_PATH {blocker}/data cannot be written" in failed.stderr, failed.stderr
    assert _catalog_tables(lake_env) == 0
    fixed = cli("--run", "--engine", "dlt", env=lake_env)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert_lake_equals_source(load_settings(lake_env), expected_rows=100)


@pytest.mark.parametrize("engine", ["spark", "dlt"])
def test_a_column_added_to_the_source_is_added_to_the_lake_with_its_first_batch(settings, lake_env, spark,
                                                                                 engine):
    """Schema drift: new source columns appear in the lake, typed, in the same snapshot as the
    first rows carrying them; older rows read NULL; SCHEMA_DRIFT=ignore logs and skips them."""
    from tests.helpers import run

    add_events(settings, 100, seed=63)
    run(settings, engine=engine, spark=spark)
    dsn = resolve(settings).source_dsn
    with psycopg.connect(dsn.conninfo(), autocommit=True) as conn:
        conn.execute("ALTER TABLE public.events ADD COLUMN tenant text, ADD COLUMN priority int")
    ignored = load_settings({**lake_env, "SCHEMA_DRIFT": "ignore"})
    add_events(settings, 20, seed=64)
    assert run(ignored, engine=engine, spark=spark).rows_inserted == 20
    assert "tenant" not in [r[0] for r in lake_query(settings, "DESCRIBE lake.main.events")]

    add_events(settings, 30, seed=65)
    with psycopg.connect(dsn.conninfo(), autocommit=True) as conn:
        conn.execute("UPDATE public.events SET tenant = 'acme', priority = 7 WHERE tenant IS NULL "
                     "AND created_at > now() - interval '1 minute' AND event_id NOT IN "
                     "(SELECT event_id FROM public.events ORDER BY created_at LIMIT 120)")
    before = len(data_snapshots(settings))
    report = run(settings, engine=engine, spark=spark)
    assert report.rows_inserted == 30 and len(data_snapshots(settings)) == before + 1
    columns = dict(lake_query(settings, "SELECT column_name, data_type FROM duckdb_columns() "
                                        "WHERE table_name = 'events' AND schema_name = 'main'"))
    assert columns["tenant"] == "VARCHAR" and columns["priority"] == "BIGINT"
    assert lake_query(settings, "SELECT count(*) FILTER (WHERE tenant = 'acme' AND priority = 7), "
                                "count(*) FILTER (WHERE tenant IS NULL) FROM lake.main.events") == [(30, 120)]
    assert_lake_equals_source(settings, expected_rows=150)


def test_a_source_role_without_select_is_named_with_its_grant(settings, lake_env, cli):
    """--doctor said "ok source" for a role without SELECT, and the next run "unexpected error …
    permission denied". Both now name the role, the table and the GRANT; after it the run loads."""
    import json
    import uuid

    import psycopg

    from pipeline.settings.pgdsn import PgDsn
    from pipeline.settings.resolve import resolve

    add_events(settings, 20, seed=31)
    owner = resolve(settings).source_dsn
    role = f"el_noselect_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(owner.conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        env = {**lake_env, "SOURCE_PG_DSN": PgDsn.parse(f"host={owner.host} port={owner.port} "
                                                         f"dbname={owner.dbname} user={role}").conninfo()}
        from pipeline.ops.doctor import FAIL, Doctor

        # doctor's source check as --doctor runs it (its Spark check would stop this process's session)
        checked = Doctor(resolve(load_settings(env))).source()
        assert checked.status == FAIL and "may not read public.events" in checked.detail
        assert f"GRANT SELECT ON public.events TO {role};" in checked.hint
        ran = cli("--run", "--engine", "dlt", env=env)
        assert ran.returncode == 1 and "unexpected" not in ran.stdout + ran.stderr
        assert f"The source role {role} may not read public.events (no SELECT)" in ran.stderr
        assert f"GRANT SELECT ON public.events TO {role};" in ran.stderr
        # --status says so too, failing (was an unexpected error, and exit 0 with --json)
        status = cli("--status", "--json", env=env)
        assert status.returncode == 2, status.stdout + status.stderr
        document = json.loads(status.stdout)
        assert "may not read public.events (no SELECT)" in document["source_error"]
        assert f"GRANT SELECT ON public.events TO {role};" in document["source_error"]
        with psycopg.connect(owner.conninfo(), autocommit=True) as conn:
            conn.execute(f"GRANT SELECT ON public.events TO {role}")
        assert cli("--run", "--engine", "dlt", env=env).returncode == 0
    finally:
        with psycopg.connect(owner.conninfo(), autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_a_role_without_usage_on_a_mixed_case_schema_is_told_the_grant(lake_env, cli):
    """Found by the adversary: the table's lookup ran before the access check and failed with
    "unexpected error: permission denied for schema Sales"; the GRANT is named, quoted as needed."""
    import uuid

    import psycopg

    from pipeline.settings.pgdsn import PgDsn
    from pipeline.settings.resolve import resolve

    owner = resolve(load_settings(lake_env)).source_dsn
    role = f"el_nousage_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(owner.conninfo(), autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "Sales"')
        conn.execute('CREATE TABLE "Sales"."Orders" (id bigint PRIMARY KEY, at timestamptz NOT NULL)')
        conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        env = {**lake_env, "SOURCE_TABLES": "Sales.Orders:at:id",
               "SOURCE_PG_DSN": PgDsn.parse(f"host={owner.host} port={owner.port} dbname={owner.dbname} "
                                            f"user={role}").conninfo()}
        ran = cli("--run", "--engine", "dlt", env=env)
        assert ran.returncode == 1 and "unexpected" not in ran.stdout + ran.stderr, ran.stderr[-2000:]
        assert f'GRANT USAGE ON SCHEMA "Sales" TO {role}; GRANT SELECT ON "Sales"."Orders" TO {role};' \
            in ran.stderr, ran.stderr[-2000:]
    finally:
        with psycopg.connect(owner.conninfo(), autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_a_run_that_fails_its_checks_is_recorded_and_status_says_so(lake_env, tmp_path, cli):
    """A failed --run (a refused folder) left --status healthy: it is recorded as a failed load."""
    import json

    add_events(load_settings(lake_env), 30, seed=63)
    assert cli("--run", "--engine", "dlt", env=lake_env).returncode == 0
    assert cli("--status", env=lake_env).returncode == 0
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    failed = cli("--run", "--engine", "dlt", env={**lake_env, "STAGING_PATH": f"{blocker}/staging"})
    assert failed.returncode == 1
    status = cli("--status", "--json", env=lake_env)
    assert status.returncode == 2, status.stdout
    reasons = json.loads(status.stdout)["health"]["reasons"]
    assert any("the last load failed" in r and "STAGING_PATH" in r and "cannot be written" in r for r in reasons)
