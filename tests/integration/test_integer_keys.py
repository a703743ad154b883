"""Tables keyed by an integer (bigserial, an identity column, a smallint): loaded without a view,
proven by identity and content, repaired; the messages name the key as the table spells it; a key
retyped between an integer and a UUID is refused by name (issue 53)."""

from __future__ import annotations

import pytest

from pipeline.errors import TerminalError
from pipeline.ops.pipeline import Pipeline
from pipeline.ops.status import collect
from pipeline.settings.resolve import resolve
from tests.conftest import load_settings
from tests.helpers import assert_lake_equals_source, lake_query, run, source_db

ORDERS = "public.orders:placed_at:order_id"


def _orders(settings, key: str = "bigserial PRIMARY KEY", rows: int = 40) -> None:
    with source_db(settings) as conn:
        conn.execute(f"CREATE TABLE public.orders (order_id {key}, placed_at timestamptz NOT NULL, "
                     "amount numeric(12,2), created_at timestamptz DEFAULT now())")
        # in the look-back (where --status compares); keys past 2**32, and negative ones, too
        conn.execute("SELECT setval(pg_get_serial_sequence('public.orders', 'order_id'), 4294967296)"
                     if "serial" in key else "SELECT 1")
        conn.execute("INSERT INTO public.orders (placed_at, amount) SELECT now() - interval '2 minutes' + "
                     f"make_interval(secs => i), i * 2.5 FROM generate_series(1, {rows}) i")


@pytest.mark.parametrize("engine", ["dlt", "spark"])
def test_a_bigint_keyed_table_is_loaded_proven_and_repaired(lake_env, engine, spark):
    settings = load_settings({**lake_env, "SOURCE_TABLES": ORDERS})
    _orders(settings)
    with source_db(settings) as conn:  # a key below zero spells its sign
        conn.execute("INSERT INTO public.orders (order_id, placed_at, amount) VALUES (-7, now() - interval '1 minute', 1)")
    report = run(settings, engine=engine, spark=spark if engine == "spark" else None)
    assert report.rows_inserted == 41 and report.lacking == {}, report
    assert lake_query(settings, f"SELECT any_value(typeof(order_id)), min(order_id), max(order_id) "
                                f"FROM {settings.lake_name}.main.orders") == [("BIGINT", -7, 4294967336)]
    assert_lake_equals_source(settings, expected_rows=41)
    assert run(settings, engine="dlt").rows_inserted == 0  # a rerun holds every key once
    with source_db(settings) as conn:
        conn.execute("UPDATE public.orders SET amount = amount + 0.01 WHERE order_id = 4294967300")
        conn.execute("DELETE FROM public.orders WHERE order_id = -7")
    status = collect(resolve(settings))
    assert status.health.state == "failing", status.health.reasons
    with Pipeline(settings, engine="dlt") as pipeline:
        proven = pipeline.prove(None).tables["orders"]
        # the rows named by their keys, as the table spells them
        assert proven.as_dict()["changed_ids"] == ["4294967300"] and proven.as_dict()["extra_ids"] == ["-7"]
        assert "e.g. 4294967300" in proven.describe() and "e.g. -7" in proven.describe()
        repaired = pipeline.repair(None)
        assert (repaired.rows_removed, repaired.rows_loaded) == (2, 1), repaired.summary()
        assert pipeline.prove(None).exact
    assert_lake_equals_source(settings, expected_rows=40)
    assert collect(resolve(settings)).health.state == "healthy"


def test_an_int_identity_and_a_smallint_key_load_as_bigint(lake_env):
    settings = load_settings({**lake_env, "SOURCE_TABLES": ORDERS})
    _orders(settings, "smallint PRIMARY KEY GENERATED ALWAYS AS IDENTITY", rows=30)
    assert run(settings, engine="dlt").rows_inserted == 30
    assert_lake_equals_source(settings, expected_rows=30)


def test_a_key_retyped_between_an_integer_and_a_uuid_is_refused_by_name(lake_env):
    settings = load_settings({**lake_env, "SOURCE_TABLES": ORDERS})
    _orders(settings, rows=5)
    run(settings, engine="dlt")
    with source_db(settings) as conn:
        conn.execute("ALTER TABLE public.orders ALTER COLUMN order_id DROP DEFAULT, "
                     "ALTER COLUMN order_id TYPE text USING gen_random_uuid()::text")
    with pytest.raises(TerminalError) as refused:
        run(settings, engine="dlt")
    assert "public.orders.order_id is text, a UUID" in str(refused.value)
    assert "holds its key order_id as BIGINT" in str(refused.value)
    # every command says so, and none takes a row out (--repair removed all five, found by the
    # adversary: compared by the other type, every row differed)
    status = collect(resolve(settings))
    assert status.health.state == "failing", status.health.reasons
    assert any("public.orders.order_id is text" in reason for reason in status.health.reasons), status.health
    with Pipeline(settings, engine="dlt") as pipeline:
        for command in (pipeline.verify, lambda: pipeline.repair(None)):
            with pytest.raises(TerminalError, match="holds its key order_id as BIGINT"):
                command()
    assert lake_query(settings, f"SELECT count(*) FROM {settings.lake_name}.main.orders") == [(5,)]
