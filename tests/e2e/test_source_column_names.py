"""No name a source table may give its columns collides with one the pipeline adds. A ``refunds``
table with its own ``reason`` lost every refund whose reason was set (1,520 of 2,000, counted as
"duplicates", exit 0): validation's own ``reason`` was shadowed by the table's. Here every helper
name the pipeline uses (validation's, the conflict ranking's, the quarantine hash, the hive
partition keys) is a column of a source table, listed first of two, and of the events table too
(schema drift); every value reaches the lake, and a row that cannot load is quarantined, not lost."""

from __future__ import annotations

import json

import psycopg

from pipeline.lake.validate import REASON_NULL_TS, Helpers
from pipeline.settings import load_settings
from pipeline.settings.resolve import resolve
from tests.conftest import run_cli
from tests.helpers import add_events, assert_lake_equals_source, lake_query

# every name validation adds with its default prefix, the names it used before it had one, and
# the partition keys DuckLake's hive folders carry
HELPERS = Helpers()
TAKEN = sorted({HELPERS.reason, HELPERS.raw_id, HELPERS.raw_details, HELPERS.rank, HELPERS.content,
                HELPERS.winner, HELPERS.raw_hash, "reason", "raw_event_id", "raw_details", "rank", "content",
                "winner", "raw_hash", "year", "month", "day"})
REFUNDS = 400


def test_source_columns_named_as_the_pipelines_own_load_every_value(settings, lake_env):
    add_events(settings, 60, seed=201)
    dsn = resolve(settings).source_dsn.conninfo()
    columns = ", ".join(f"{name} text" for name in TAKEN)
    values = ", ".join(f"CASE WHEN i % 4 = 0 THEN NULL ELSE '{name}-' || i END" for name in TAKEN)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE public.refunds (refund_id uuid PRIMARY KEY, refunded_at timestamptz, "
                     f"amount numeric(12,2), {columns})")
        conn.execute(f"INSERT INTO public.refunds SELECT gen_random_uuid(), now() - i * interval '1 minute', "
                     f"i / 100.0, {values} FROM generate_series(1, {REFUNDS}) i")
        # a refund no time dates cannot load: quarantined with its reason, not dropped unseen
        conn.execute(f"INSERT INTO public.refunds (refund_id, refunded_at, {', '.join(TAKEN)}) "
                     f"SELECT gen_random_uuid(), NULL, {', '.join(repr(n) for n in TAKEN)}")
        conn.execute(f"ALTER TABLE public.events ADD COLUMN reason text, ADD COLUMN {HELPERS.reason} text, "
                     "ADD COLUMN year integer")
        conn.execute(f"UPDATE public.events SET reason = 'why', {HELPERS.reason} = 'ours?', year = 1999")
        source = {row[0]: row[1:] for row in conn.execute(
            f"SELECT refund_id::text, amount, {', '.join(TAKEN)} FROM public.refunds WHERE refunded_at IS NOT NULL")}
    env = {**lake_env, "SOURCE_TABLES": "public.refunds:refunded_at:refund_id,public.events"}
    loaded = run_cli("events_pipeline.py", "--run", env=env)
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr

    lake = {str(row[0]): row[1:] for row in lake_query(
        settings, f"SELECT refund_id, amount, {', '.join(TAKEN)} FROM {settings.lake_name}.main.refunds")}
    assert len(lake) == REFUNDS, f"{REFUNDS - len(lake)} of {REFUNDS} refunds did not reach the lake"
    assert lake == source  # every column, every value, NULLs where the source has them
    events = lake_query(settings, f"SELECT count(*), count(*) FILTER (WHERE reason = 'why' AND "
                                  f"{HELPERS.reason} = 'ours?' AND year = 1999) FROM {settings.lake_name}.main.events")
    assert events == [(60, 60)]
    [(reason, raw_id, kept)] = lake_query(settings, "SELECT reason, event_id, source_columns::VARCHAR FROM "
                                                    f"{settings.lake_name}.ops.quarantine "
                                                    "WHERE table_name = 'refunds'")
    assert reason == REASON_NULL_TS and raw_id
    # the set-aside row keeps every column of the table, as the source sent them
    assert json.loads(kept) == {"amount": None, **{name: name for name in TAKEN}}
    assert_lake_equals_source(load_settings(env), {"refunds": REFUNDS, "events": 60})
