"""Check before creating: a renamed column or an unwritable data path fails the run with the
value and the fix, before the catalog holds any lake table; after the fix the run loads."""

from __future__ import annotations

import psycopg

from pipeline.settings import load_settings
from pipeline.settings.resolve import resolve
from tests.conftest import run_cli
from tests.helpers import add_events, assert_lake_equals_source


def _catalog_tables(lake_env) -> int:
    with psycopg.connect(lake_env["DUCKLAKE_CATALOG"]) as conn:
        return conn.execute("SELECT count(*) FROM information_schema.tables "
                            "WHERE table_name LIKE 'ducklake%%'").fetchone()[0]


def test_a_renamed_source_column_is_named_and_nothing_is_created(settings, lake_env):
    add_events(settings, 200, seed=61)
    dsn = resolve(settings).source_dsn
    with psycopg.connect(dsn.conninfo(), autocommit=True) as conn:
        conn.execute("ALTER TABLE public.events RENAME COLUMN event_timestamp TO occurred_at")
    failed = run_cli("events_pipeline.py", "--run", env=lake_env)
    output = failed.stdout + failed.stderr
    assert failed.returncode == 1, output
    assert "has no column event_timestamp" in output and "occurred_at" in output
    assert "Traceback" not in output
    assert _catalog_tables(lake_env) == 0  # the lake was not even created

    with psycopg.connect(dsn.conninfo(), autocommit=True) as conn:
        conn.execute("ALTER TABLE public.events RENAME COLUMN occurred_at TO event_timestamp")
        conn.execute("ALTER TABLE public.events ALTER COLUMN event_timestamp TYPE text")
    retyped = run_cli("events_pipeline.py", "--run", "--engine", "dlt", env=lake_env)
    assert retyped.returncode == 1 and "event_timestamp is text" in retyped.stderr, retyped.stderr

    with psycopg.connect(dsn.conninfo(), autocommit=True) as conn:
        conn.execute("ALTER TABLE public.events ALTER COLUMN event_timestamp TYPE timestamptz "
                     "USING event_timestamp::timestamptz")
        conn.execute("ALTER TABLE public.events ADD COLUMN tenant text DEFAULT 'acme'")
    fixed = run_cli("events_pipeline.py", "--run", "--engine", "dlt", env=lake_env)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "tenant are not loaded" in fixed.stderr  # an extra column is named, not dropped silently
    assert_lake_equals_source(settings, expected_rows=200)


def test_an_unwritable_data_path_fails_before_the_catalog_is_bound_to_it(lake_env, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    env = {**lake_env, "DUCKLAKE_DATA_PATH": f"{blocker}/data/"}
    settings = load_settings(env)
    add_events(settings, 100, seed=62)
    failed = run_cli("events_pipeline.py", "--run", "--engine", "dlt", env=env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"DUCKLAKE_DATA_PATH {blocker}/data cannot be written" in failed.stderr, failed.stderr
    assert _catalog_tables(lake_env) == 0
    fixed = run_cli("events_pipeline.py", "--run", "--engine", "dlt", env=lake_env)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert_lake_equals_source(load_settings(lake_env), expected_rows=100)
