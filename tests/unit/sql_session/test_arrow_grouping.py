"""An arrow DuckDB read with a boolean left operand is grouped with the operand just left of it; every
other statement is left exactly as written. Parsed by DuckDB itself, as the session does."""

import json

import duckdb
import pytest

from pipeline.sql_session.arrow_grouping import regrouped
from pipeline.sqltext import quote_literal


def _parse(text: str) -> dict:
    return json.loads(duckdb.execute(f"SELECT json_serialize_sql({quote_literal(text)})").fetchone()[0])


def _regrouped(text: str) -> str | None:
    found = regrouped(text, _parse(text), _parse)
    return None if found is None else found[0]


@pytest.mark.parametrize(("written", "meant"), [
    # the seed's change-feed question
    ("SELECT count(*) FROM table_changes('events', 1, 2) WHERE event_type = 'error_occurred' "
     "AND details->>'severity' = 'critical'",
     "SELECT count(*) FROM table_changes('events', 1, 2) WHERE event_type = 'error_occurred' "
     "AND (details->>'severity') = 'critical'"),
    ("SELECT 1 FROM t WHERE details->>'a' = 'x' AND details->>'b' = 'y'",
     "SELECT 1 FROM t WHERE details->>'a' = 'x' AND (details->>'b') = 'y'"),
    ("SELECT 1 FROM t WHERE a OR t.details ->> 'k' IN ('v', 'w')",
     "SELECT 1 FROM t WHERE a OR (t.details ->> 'k') IN ('v', 'w')"),
    ("SELECT 1 FROM t WHERE NOT details->>'k' = 'v'", "SELECT 1 FROM t WHERE NOT (details->>'k') = 'v'"),
    ("SELECT 1 FROM t WHERE a AND json(d)->>'k' = $1 AND d::JSON->>'q' = ? AND \"My Col\"->>'it''s' LIKE 'v%'",
     "SELECT 1 FROM t WHERE a AND (json(d)->>'k') = $1 AND (d::JSON->>'q') = ? AND (\"My Col\"->>'it''s') LIKE 'v%'"),
    ("SELECT 1 FROM t WHERE a = 1 AND CAST(d AS JSON)->>0 IS NULL",
     "SELECT 1 FROM t WHERE a = 1 AND (CAST(d AS JSON)->>0) IS NULL"),
])
def test_an_arrow_that_captured_a_boolean_is_grouped_with_its_operand(written, meant):
    assert _regrouped(written) == meant
    assert _regrouped(meant) is None  # and the grouped statement is read as meant: nothing left to group


@pytest.mark.parametrize("text", [
    "SELECT 1 FROM t WHERE details->>'k' = 'v'",  # read as meant already
    "SELECT 1 FROM t WHERE (details->>'k') = 'v' AND a",
    "SELECT 1 FROM t WHERE a = 'x AND details->>''k'' = v'",  # an arrow in a string
    "SELECT (a || b)->>'k' FROM t",  # an arithmetic operand: as DuckDB reads it
    "SELECT list_transform([1], x -> x + 1) FROM t WHERE a AND b",  # a lambda's arrow is another
])
def test_every_other_statement_is_left_as_written(text):
    assert _regrouped(text) is None
