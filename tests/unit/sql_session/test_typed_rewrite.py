"""The typed-column rewrite on DuckDB's own parse trees: what it serves from a column, what it leaves
alone (a snapshot before the key was complete, another table's details, a subquery, a join, a CTE,
the select list), and that what it serves returns the rows the JSON form returns."""

from __future__ import annotations

import json

import duckdb
import pytest

from pipeline.lake.payload_fields import TypedKey
from pipeline.sql_session.typed_rewrite import rewrite

KEYS = {"events": [TypedKey("user_id", "details_user_id", "string", 5)]}


def _tree(con: duckdb.DuckDBPyConnection, sql: str) -> dict:
    return json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])


def _served(con: duckdb.DuckDBPyConnection, sql: str, snapshot: int = 9) -> str | None:
    done = rewrite(_tree(con, sql), "lake", KEYS, snapshot)
    if done is None:
        return None
    return con.execute("SELECT json_deserialize_sql(?)", [json.dumps(done[0])]).fetchone()[0]


@pytest.fixture
def con():
    with duckdb.connect() as connection:
        yield connection


@pytest.mark.parametrize("sql, column", [
    ("SELECT * FROM lake.events AT (VERSION => 7) WHERE details->>'user_id' = 'u1' ORDER BY event_timestamp",
     "(details_user_id = 'u1')"),
    ("SELECT * FROM events WHERE details->>'user_id' = 'u1'", "(details_user_id = 'u1')"),
    ("SELECT * FROM lake.main.events e WHERE e.details->>'user_id' IN ('a', 'b') AND e.event_type = 'x'",
     "(e.details_user_id IN ('a', 'b'))"),
    ("SELECT count(*) FROM events WHERE events.details ->> 'user_id' IS NULL", "(events.details_user_id IS NULL)"),
])
def test_a_filter_on_a_complete_typed_key_reads_its_column(con, sql, column):
    served = _served(con, sql)
    assert served is not None and column in served and "->>" not in served.split("WHERE")[1]


@pytest.mark.parametrize("sql", [
    # the key's column is complete from snapshot 5: not at 4
    "SELECT * FROM events AT (VERSION => 4) WHERE details->>'user_id' = 'u1'",
    # another table's details, a join, a CTE, a subquery's own details, only in the select list
    "SELECT * FROM events e WHERE x.details->>'user_id' = 'u1'",
    "SELECT * FROM events a JOIN events b USING (event_id) WHERE a.details->>'user_id' = 'u1'",
    "WITH events AS (SELECT * FROM other) SELECT * FROM events WHERE details->>'user_id' = 'u1'",
    "SELECT details->>'user_id' FROM events",
    "SELECT * FROM events WHERE details->>'session_id' = 's'",  # not typed
    "SELECT * FROM events WHERE details->>'$.user_id' = 'u1'",  # a path, not the key
    "SELECT * FROM other.main.events WHERE details->>'user_id' = 'u1'",  # not the lake
    "SELECT * FROM events AT (VERSION => 2 + 5) WHERE details->>'user_id' = 'u1'",  # not a constant
    # a lambda's own parameter named details (the adversary's wrong rows)
    "SELECT * FROM events WHERE len(list_filter(['{\"user_id\": \"u1\"}'::JSON], "
    "lambda details: (details->>'user_id') = 'u1')) > 0",
])
def test_what_it_cannot_prove_the_same_runs_as_written(con, sql):
    assert _served(con, sql, snapshot=4 if "VERSION => 4" in sql else 9) is None


def test_a_subquery_keeps_its_own_details(con):
    served = _served(con, "SELECT * FROM events WHERE details->>'user_id' = 'u1' AND event_id IN "
                          "(SELECT event_id FROM other WHERE details->>'user_id' = 'u2')")
    assert served is not None
    assert "(details_user_id = 'u1')" in served and "((details ->> 'user_id') = 'u2')" in served


def test_served_and_written_forms_return_the_same_rows(con):
    con.execute("CREATE TABLE events (event_id INTEGER, details JSON, details_user_id VARCHAR)")
    payloads = ['{"user_id": "u1"}', '{"user_id": 1}', '{"user_id": null}', None, '{"other": 1}',
                '["u1"]', '{"user_id": {"a": 1}}', '{"user_id": "u\\u0031"}', '{"user_id": true}']
    con.executemany("INSERT INTO events VALUES (?, ?, CAST(? AS JSON) ->> 'user_id')",
                    [(i, p, p) for i, p in enumerate(payloads)])
    for probe in ["= 'u1'", "= '1'", "IS NULL", "IS NOT NULL", "= 'true'", "LIKE '%a%'", "IN ('u1', '1')"]:
        sql = f"SELECT event_id FROM events WHERE details->>'user_id' {probe} ORDER BY event_id"
        served = _served(con, sql)
        assert served is not None
        assert con.execute(served).fetchall() == con.execute(sql).fetchall(), probe
