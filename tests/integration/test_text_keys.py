"""Tables keyed by text of any form (an order reference, a slug, a key with blanks or non-ASCII
letters): loaded as spelled, without a view, proven by identity and content, repaired; two keys
differing only by case or by a blank are two rows; a key retyped from text to an integer is
refused by name (issue 53)."""

from __future__ import annotations

import hashlib

import pytest

from pipeline.errors import TerminalError
from pipeline.ops.pipeline import Pipeline
from pipeline.ops.status import collect
from pipeline.settings.resolve import resolve
from tests.conftest import load_settings
from tests.helpers import assert_lake_equals_source, lake_query, run, source_db

REFUNDS = "public.refunds:refunded_at:refund_ref"
# keys a UUID rule would have read as one, or refused: case, braces, blanks, a tab, non-ASCII, empty
ODD_KEYS = ["A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", " ref-1", "ref-1", "\tref-1", "возврат-7", ""]


def _refunds(settings, rows: int = 30) -> None:
    with source_db(settings) as conn:
        conn.execute("CREATE TABLE public.refunds (refund_ref text PRIMARY KEY, refunded_at timestamptz NOT NULL, "
                     "amount numeric(12,2), created_at timestamptz DEFAULT now())")
        conn.execute("INSERT INTO public.refunds (refund_ref, refunded_at, amount) SELECT 'RF-' || lpad(i::text, 6, "
                     "'0'), now() - interval '2 minutes' + make_interval(secs => i), i * 1.5 "
                     f"FROM generate_series(1, {rows}) i")
        for position, key in enumerate(ODD_KEYS):
            conn.execute("INSERT INTO public.refunds (refund_ref, refunded_at, amount) VALUES "
                         "(%s, now() - interval '1 minute' + make_interval(secs => %s), 1)", (key, position))


def _md5(key: str) -> str:
    return "md5:" + hashlib.md5(key.encode()).hexdigest()


@pytest.mark.parametrize("engine", ["dlt", "spark"])
def test_a_text_keyed_table_is_loaded_as_spelled_proven_and_repaired(lake_env, engine, spark):
    settings = load_settings({**lake_env, "SOURCE_TABLES": REFUNDS})
    _refunds(settings)
    report = run(settings, engine=engine, spark=spark if engine == "spark" else None)
    assert report.rows_inserted == 30 + len(ODD_KEYS) and report.lacking == {}, report
    held = lake_query(settings, f"SELECT refund_ref FROM {settings.lake_name}.main.refunds WHERE refund_ref "
                                "NOT LIKE 'RF-%' ORDER BY refund_ref")
    assert sorted(key for (key,) in held) == sorted(ODD_KEYS)  # every spelling kept, none quarantined
    assert lake_query(settings, f"SELECT count(*) FROM {settings.lake_name}.ops.quarantine") == [(0,)]
    assert_lake_equals_source(settings, expected_rows=30 + len(ODD_KEYS))
    assert run(settings, engine="dlt").rows_inserted == 0  # a rerun holds every key once
    assert collect(resolve(settings)).health.state == "healthy"
    with source_db(settings) as conn:
        conn.execute("UPDATE public.refunds SET amount = amount + 0.01 WHERE refund_ref = 'RF-000007'")
        conn.execute("DELETE FROM public.refunds WHERE refund_ref = %s", ("\tref-1",))
    status = collect(resolve(settings))
    assert status.health.state == "failing", status.health.reasons
    with Pipeline(settings, engine="dlt") as pipeline:
        proven = pipeline.prove(None).tables["refunds"]
        # a text key is named by the md5 of its text (WHERE md5(refund_ref) = '…' finds it)
        assert proven.as_dict()["changed_ids"] == [_md5("RF-000007")], proven.describe()
        assert proven.as_dict()["extra_ids"] == [_md5("\tref-1")], proven.describe()
        repaired = pipeline.repair(None)
        assert (repaired.rows_removed, repaired.rows_loaded) == (2, 1), repaired.summary()
        assert pipeline.prove(None).exact
    assert_lake_equals_source(settings, expected_rows=29 + len(ODD_KEYS))
    # the blank-led spelling went, the others stayed
    assert lake_query(settings, f"SELECT count(*) FROM {settings.lake_name}.main.refunds "
                                "WHERE refund_ref IN (' ref-1', 'ref-1')") == [(2,)]
    assert collect(resolve(settings)).health.state == "healthy"


def test_a_text_key_retyped_to_an_integer_is_refused_by_name(lake_env):
    settings = load_settings({**lake_env, "SOURCE_TABLES": REFUNDS})
    _refunds(settings, rows=5)
    with source_db(settings) as conn:
        conn.execute("DELETE FROM public.refunds WHERE refund_ref NOT LIKE 'RF-%'")
    run(settings, engine="dlt")
    with source_db(settings) as conn:
        conn.execute("ALTER TABLE public.refunds ALTER COLUMN refund_ref TYPE bigint "
                     "USING substr(refund_ref, 4)::bigint")
    with pytest.raises(TerminalError) as refused:
        run(settings, engine="dlt")
    assert "public.refunds.refund_ref is int8, an integer" in str(refused.value)
    assert "holds its key refund_ref as VARCHAR" in str(refused.value)
    assert lake_query(settings, f"SELECT count(*) FROM {settings.lake_name}.main.refunds") == [(5,)]
