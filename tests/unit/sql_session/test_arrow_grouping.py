"""An arrow DuckDB read with a boolean left operand is grouped with the operand just left of it; every
other statement is left exactly as written. Parsed by DuckDB itself, as the session does."""

import duckdb
import pytest

from pipeline.sql_session.arrow_grouping import regrouped
from pipeline.sql_session.query import parsed_tree


def _parse(text: str) -> dict:
    with duckdb.connect() as con:
        return parsed_tree(con, text)


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
    # placed after their first word by DuckDB (found by the adversary): a call, a typed literal
    ("SELECT 1 FROM t WHERE a AND coalesce(details, '{}')->>'k' = 'v'",
     "SELECT 1 FROM t WHERE a AND (coalesce(details, '{}')->>'k') = 'v'"),
    ("SELECT true AND JSON '{\"k\": \"v\"}'->>'k' = 'v'", "SELECT true AND (JSON '{\"k\": \"v\"}'->>'k') = 'v'"),
    # DuckDB places by byte: a character of two bytes before the arrow
    ("SELECT 1 FROM t WHERE a <> 'café' AND details->>'k' = 'v'",
     "SELECT 1 FROM t WHERE a <> 'café' AND (details->>'k') = 'v'"),
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


ROWS = [("login", '{"k": "v", "n": 1}'), ("login", '{"k": "w"}'), ("café", '{"k": "v"}'), ("other", None),
        ("login", '[1]'), ("login", '{"k": null}')]


@pytest.mark.parametrize(("written", "by_hand"), [
    ("a = 'login' AND details->>'k' = 'v'", "a = 'login' AND json_extract_string(details, 'k') = 'v'"),
    ("a <> 'café' AND details->>'k' = 'v'", "a <> 'café' AND json_extract_string(details, 'k') = 'v'"),
    ("a = 'login' AND coalesce(details, '{}')->>'k' = 'v'",
     "a = 'login' AND json_extract_string(coalesce(details, '{}'), 'k') = 'v'"),
    ("a = 'login' AND coalesce(details, details)->>'k' IS NULL",
     "a = 'login' AND json_extract_string(coalesce(details, details), 'k') IS NULL"),
    ("NOT details->>'k' = 'v' OR details->>'n' = '1'",
     "NOT json_extract_string(details, 'k') = 'v' OR json_extract_string(details, 'n') = '1'"),
])
def test_the_rows_are_those_the_writer_meant(written, by_hand):
    """Run, not only compared as text: the regrouped statement returns what the filter written with
    json_extract_string returns (a grouping inside coalesce's parentheses returned 0 rows of 2)."""
    with duckdb.connect() as con:
        con.execute("CREATE TABLE t (a VARCHAR, details JSON)")
        con.executemany("INSERT INTO t VALUES (?, ?)", ROWS)
        text = f"SELECT count(*) FROM t WHERE {written}"
        grouped = regrouped(text, _parse(text), _parse)
        assert grouped is not None
        expected = con.execute(f"SELECT count(*) FROM t WHERE {by_hand}").fetchall()
        assert con.execute(grouped[0]).fetchall() == expected, grouped[0]


@pytest.mark.parametrize("text", [
    # an arrow under a ->, a lambda's body: not regrouped, they fail as DuckDB fails them
    "SELECT 1 FROM t WHERE a AND details->'s'->>'$' = '200'",
    "SELECT list_filter([details], x -> true AND x->>'k' = 'v') FROM t",
])
def test_what_it_cannot_place_runs_as_written(text):
    assert _regrouped(text) is None
