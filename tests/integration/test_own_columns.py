"""SOURCE_TABLES entries with their own id and time columns (``schema.table:time_column:id_column``)
and none of the event columns: the lake table keeps the table's own columns and types, and a
row the source deletes or moves after loading is found by id, never loaded twice."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from generators.writer import add_events as add_events_to
from pipeline.errors import TerminalError
from pipeline.ops.pipeline import Pipeline
from pipeline.settings.model import TableSpec
from pipeline.settings.resolve import resolve
from pipeline.source.connect import connect
from tests.helpers import assert_lake_equals_source, lake_query, run

ORDERS = TableSpec("public.orders", "placed_at", "order_id")


def _orders(settings, rows: int, start: int = 0) -> None:
    """An application's table: a uuid key, its own time column, no event_type, details or
    created_at (so no arrival column: read by its window), and columns of several types."""
    with connect(settings.source_dsn) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.orders (order_id uuid PRIMARY KEY, "
                     "placed_at timestamptz NOT NULL, amount numeric(10,2), tags text[], payload jsonb, "
                     "paid boolean)")
        conn.execute("CREATE INDEX IF NOT EXISTS orders_placed_at ON public.orders (placed_at)")
        conn.execute("INSERT INTO public.orders SELECT gen_random_uuid(), now() - make_interval(secs => i), "
                     "i * 1.25, ARRAY['a', 'b' || i], jsonb_build_object('n', i), i %% 2 = 0 "
                     "FROM generate_series(%s::int, %s::int) i", (start + 1, start + rows))


def _loaded(settings) -> dict[str, object]:
    [row] = lake_query(settings, f"SELECT count(*), count(DISTINCT order_id), sum(amount), count(*) FILTER "
                                 f"(WHERE payload->>'n' IS NOT NULL) FROM {settings.lake_name}.main.orders")
    return dict(zip(("rows", "ids", "amount", "payloads"), row, strict=True))


@pytest.fixture
def orders(settings):
    return resolve(replace(settings, tables=(ORDERS,)))


def test_a_table_lands_with_its_own_columns_and_types(orders):
    _orders(orders, 40)
    report = run(orders, engine="dlt")
    assert report.rows_inserted == 40
    types = dict(lake_query(orders, "SELECT column_name, data_type FROM duckdb_columns() WHERE "
                                    f"database_name = '{orders.lake_name}' AND schema_name = 'main' "
                                    "AND table_name = 'orders'"))
    assert types == {"order_id": "UUID", "placed_at": "TIMESTAMP WITH TIME ZONE", "amount": "DECIMAL(10,2)",
                     "tags": "VARCHAR", "payload": "JSON", "paid": "BOOLEAN",
                     "_el_known_snapshot": "BIGINT"}, types  # each row's first snapshot (lake.known.orders)
    assert _loaded(orders) == {"rows": 40, "ids": 40, "amount": Decimal("1025.00"), "payloads": 40}
    assert_lake_equals_source(orders, expected_rows=40)
    # the lake table is partitioned by the day of its own time column
    [(partitioned,)] = lake_query(orders, f"SELECT count(*) FROM ducklake_list_files('{orders.lake_name}', "
                                          "'orders') WHERE data_file LIKE '%year=%'")
    assert partitioned >= 1


def test_a_row_the_source_deletes_or_moves_is_found_by_id_and_not_loaded_twice(orders):
    _orders(orders, 30)
    run(orders, engine="dlt")
    with connect(orders.source_dsn) as conn:
        [(deleted,)] = conn.execute("DELETE FROM public.orders WHERE order_id = (SELECT order_id FROM "
                                    "public.orders ORDER BY placed_at LIMIT 1) RETURNING order_id").fetchall()
        # into the next window (read again: must not load twice), and hours back (another bucket)
        [(later,)] = conn.execute("UPDATE public.orders SET placed_at = now() WHERE order_id = (SELECT order_id "
                                  "FROM public.orders ORDER BY placed_at DESC LIMIT 1) RETURNING order_id").fetchall()
        [(moved,)] = conn.execute("UPDATE public.orders SET placed_at = now() - interval '3 hours' WHERE "
                                  "order_id = (SELECT order_id FROM public.orders ORDER BY placed_at LIMIT 1) "
                                  "RETURNING order_id").fetchall()
    _orders(orders, 5, start=100)
    report = run(orders, engine="dlt")
    assert report.rows_inserted == 5  # the moved row is held already: not loaded again
    assert _loaded(orders)["ids"] == _loaded(orders)["rows"] == 35
    with Pipeline(orders, engine="dlt") as pipeline:
        check = pipeline.prove(None)
    assert deleted in check.extra and moved in check.moved, check.describe()
    # moved seconds later, in its hour: the lake holds it as it was (its time is part of its contents)
    assert later in check.changed + check.moved, check.describe()
    assert not check.missing, check.describe()
    with Pipeline(orders, engine="dlt") as pipeline:  # --repair: the lake holds the source's rows again
        repaired = pipeline.repair(None)
        assert pipeline.prove(None).exact
    assert (repaired.rows_removed, repaired.rows_loaded) == (3, 2), repaired.summary()
    [(amounts, payloads)] = lake_query(orders, f"SELECT count(amount), count(payload) FROM "
                                               f"{orders.lake_name}.main.orders WHERE order_id = '{moved}'")
    assert (amounts, payloads) == (1, 1)  # the repaired row with its own columns, not just the id and time


def test_an_id_that_is_no_key_type_and_a_clashing_column_are_refused_naming_them(settings):
    with connect(settings.source_dsn) as conn:  # (integer keys load: tests/integration/test_integer_keys.py)
        conn.execute("CREATE TABLE public.accounts (account_id numeric PRIMARY KEY, opened_at timestamptz)")
        conn.execute("CREATE TABLE public.visits (visit_id uuid, seen_at timestamptz, event_timestamp text)")
    accounts = TableSpec("public.accounts", "opened_at", "account_id")
    with pytest.raises(TerminalError) as refused:
        run(resolve(replace(settings, tables=(accounts,))), engine="dlt")
    assert "public.accounts.account_id is numeric" in str(refused.value), refused.value
    assert "a uuid, text spelling one, or an integer" in str(refused.value) and "view" in refused.value.hint
    visits = TableSpec("public.visits", "seen_at", "visit_id")
    with pytest.raises(TerminalError) as clash:
        run(resolve(replace(settings, tables=(visits,))), engine="dlt")
    assert "has a column event_timestamp besides its seen_at" in str(clash.value)


def test_doctor_checks_every_table_by_its_own_columns(settings):
    """doctor looks at each SOURCE_TABLES table as a load reads it: a table without an arrival
    column is fine (read by its window), a numeric id fails naming the column and the fix."""
    from pipeline.ops.doctor import FAIL, OK, Doctor

    _orders(settings, 3)
    fine = resolve(replace(settings, tables=(ORDERS, TableSpec("public.events"))))
    add_events_to(settings.source_dsn, "public.events", 3, seed=41)
    check = Doctor(fine).source()
    assert check.status == OK and "public.orders, public.events" in check.detail, check
    with connect(settings.source_dsn) as conn:
        conn.execute("CREATE TABLE public.accounts (account_id numeric PRIMARY KEY, opened_at timestamptz)")
    accounts = TableSpec("public.accounts", "opened_at", "account_id")
    check = Doctor(resolve(replace(settings, tables=(ORDERS, accounts)))).source()
    assert check.status == FAIL and "public.accounts.account_id is numeric" in check.detail, check
    assert "view" in check.hint, check


def test_two_rows_of_one_id_differing_only_in_their_own_columns_are_a_conflict(settings):
    """Found by the adversary: a conflict was told by the event columns only, so of two rows of one
    id that differ in a column of the table's own, one vanished (neither loaded nor quarantined)."""
    with connect(settings.source_dsn) as conn:  # no key: an id may come twice
        conn.execute("CREATE TABLE public.readings (reading_id uuid, taken_at timestamptz, value int)")
        conn.execute("INSERT INTO public.readings SELECT 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', "
                     "'2026-11-26 10:00:00+00', v FROM (VALUES (1), (2)) t(v)")
        conn.execute("INSERT INTO public.readings SELECT gen_random_uuid(), '2026-11-26 10:00:00+00', 3")
    readings = TableSpec("public.readings", "taken_at", "reading_id")
    one = resolve(replace(settings, tables=(readings,)))
    report = run(one, engine="dlt")
    assert (report.rows_inserted, report.rows_quarantined) == (2, 1), report.summary()
    [(kept,)] = lake_query(one, f"SELECT value FROM {one.lake_name}.main.readings "
                                "WHERE reading_id = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'")
    assert kept in (1, 2)  # one of them, chosen by contents (not by the order the rows were read in)
    [(reason,)] = lake_query(one, f"SELECT reason FROM {one.lake_name}.ops.quarantine")
    assert "staged twice with different contents" in reason


def test_a_changed_time_column_is_refused_and_a_repair_survives_a_dropped_column(orders):
    """Found by the adversary: naming another time column for a loaded table reused the old one's
    watermark and partitions silently; --repair failed on a column the source dropped."""
    _orders(orders, 10)
    run(orders, engine="dlt")
    with connect(orders.source_dsn) as conn:
        conn.execute("ALTER TABLE public.orders ADD COLUMN shipped_at timestamptz DEFAULT now()")
    other = replace(orders, tables=(replace(ORDERS, time_column="shipped_at"),))
    with pytest.raises(TerminalError) as refused:
        run(other, engine="dlt")
    assert "has no column shipped_at" in str(refused.value) and "placed_at" in str(refused.value)
    # the column reached the lake (a load of the old shape): still refused, by the partitions' column
    _orders(orders, 1, start=500)
    run(orders, engine="dlt")
    with pytest.raises(TerminalError) as refused:
        run(other, engine="dlt")
    assert "was loaded dating rows by placed_at" in str(refused.value), str(refused.value)
    with connect(orders.source_dsn) as conn:
        conn.execute("ALTER TABLE public.orders DROP COLUMN tags")
        conn.execute("DELETE FROM public.orders WHERE order_id = (SELECT min(order_id::text)::uuid "
                     "FROM public.orders)")
    with Pipeline(orders, engine="dlt") as pipeline:
        repaired = pipeline.repair(None)
        assert pipeline.prove(None).exact
    # the deleted row out, nothing else: the rows loaded before shipped_at was added hold the value
    # the ALTER's default gave the source's (the lake added the column with it)
    assert (repaired.rows_removed, repaired.rows_loaded) == (1, 0), repaired.summary()
    assert not repaired.tables["orders"].check.changed
    assert lake_query(orders, f"SELECT count(*) FROM {orders.lake_name}.main.orders "
                              "WHERE shipped_at IS NULL") == [(0,)]


def test_a_table_stopped_between_its_creation_and_its_column_names_is_finished_by_the_next_load(settings):
    """A column named as DuckLake's inlined rows' (row_id) is made under a stand-in name and renamed
    in a second commit (DuckLake refuses it while the table inlines rows); a process stopped between
    the two leaves the stand-in, and the next load names it and loads every row."""
    with connect(settings.source_dsn) as conn:
        conn.execute("CREATE TABLE public.ledger (row_id uuid PRIMARY KEY, booked_at timestamptz NOT NULL, "
                     "amount bigint)")
        conn.execute("INSERT INTO public.ledger SELECT gen_random_uuid(), now() - make_interval(secs => i), i "
                     "FROM generate_series(1, 12) i")
    ledger = resolve(replace(settings, tables=(TableSpec("public.ledger", "booked_at", "row_id"),)))
    from pipeline.lake.connect import lake_session

    with lake_session(ledger) as lake:  # the first commit alone: the table under its stand-in name
        lake.execute(f'CREATE TABLE {ledger.lake_name}.main.ledger ("_el_inlining_row_id" UUID, '
                     "booked_at TIMESTAMPTZ, amount BIGINT)")
    assert run(ledger, engine="dlt").rows_inserted == 12
    assert lake_query(ledger, f"SELECT count(DISTINCT row_id), sum(amount) FROM {ledger.lake_name}.main.ledger") \
        == [(12, 78)]
    assert_lake_equals_source(ledger, expected_rows=12)


def test_a_mixed_case_table_with_quoted_column_names_loads_without_a_view(lake_env):
    """Names as the catalog spells them (issue 53): a table "Refunds" keyed by "RefundId", dated by
    "RefundedAt", with columns "Amount", "order ref" and "select". Its name was folded to refunds
    ("does not exist"), so such a table needed a view."""
    from pipeline.ops.status import collect
    from tests.conftest import load_settings

    settings = resolve(load_settings({**lake_env, "SOURCE_TABLES": "public.Refunds:RefundedAt:RefundId"}))
    with connect(settings.source_dsn) as conn:
        conn.execute('CREATE TABLE public."Refunds" ("RefundId" bigserial PRIMARY KEY, "RefundedAt" timestamptz '
                     'NOT NULL, "Amount" numeric(10,2), "order ref" text, "select" int)')
        conn.execute('INSERT INTO public."Refunds" ("RefundedAt", "Amount", "order ref", "select") SELECT now() - '
                     "interval '2 minutes' + make_interval(secs => i), i, 'o-' || i, i FROM generate_series(1, 12) i")
    assert run(settings, engine="dlt").rows_inserted == 12
    assert lake_query(settings, f'SELECT "Amount", "order ref", "select" FROM {settings.lake_name}.main."Refunds" '
                                'WHERE "RefundId" = 5') == [(Decimal("5.00"), "o-5", 5)]
    with connect(settings.source_dsn) as conn:
        conn.execute('UPDATE public."Refunds" SET "order ref" = \'changed\' WHERE "RefundId" = 5')
    assert collect(settings).health.state == "failing"
    with Pipeline(settings, engine="dlt") as pipeline:
        assert pipeline.prove(None).tables["Refunds"].as_dict()["changed_ids"] == ["5"]
        assert pipeline.repair(None).rows_loaded == 1
    assert_lake_equals_source(settings, expected_rows=12)
    assert collect(settings).health.state == "healthy"
