"""The read-only session's statement judge, on its own (pure): what USE may switch to."""

from __future__ import annotations

import pytest

from pipeline.sql_session.statement_judge import Verdict, classify, refusal, use_refusal, use_target

CATALOGS = frozenset({"lake", "__ducklake_metadata_lake", "system", "temp", "memory"})
LAKE_SCHEMAS = frozenset({"main", "ops"})


@pytest.mark.parametrize("text, target", [
    ("USE lake", ("lake",)), ("use lake.ops;", ("lake", "ops")), ('USE "lake"."main"', ("lake", "main")),
    ('USE "__ducklake_metadata_lake".pg_catalog', ("__ducklake_metadata_lake", "pg_catalog")),
])
def test_use_names_its_target(text, target):
    assert classify("SET", text).use == target
    assert use_target(text) == target


@pytest.mark.parametrize("target", [("lake",), ("LAKE",), ("lake", "ops"), ("lake", "main"), ("ops",), ("main",)])
def test_the_lake_and_its_schemas_may_be_used(target):
    assert use_refusal(target, "lake", CATALOGS, LAKE_SCHEMAS) is None


@pytest.mark.parametrize("target", [
    ("__ducklake_metadata_lake",), ("__ducklake_metadata_lake", "pg_catalog"), ("system", "main"), ("memory",),
    ("lake", "pg_catalog"), ("lake", "main", "x"), ("pg_catalog",),
])
def test_anything_else_is_refused_and_named(target):
    reason = use_refusal(target, "lake", CATALOGS, LAKE_SCHEMAS)
    assert reason is not None and ".".join(target) in reason and "(lake)" in reason


def test_a_schema_named_like_another_catalog_resolves_to_that_catalog_and_is_refused():
    """USE x switches to the database x when one exists, whatever the lake's schemas are called."""
    assert use_refusal(("system",), "lake", CATALOGS, LAKE_SCHEMAS | {"system"}) is not None


@pytest.mark.parametrize("kind, text, verdict", [
    ("SELECT", "SELECT 1", Verdict(query="SELECT 1")),
    ("TRANSACTION", "BEGIN", Verdict()),
    ("EXPLAIN", "EXPLAIN ANALYZE SELECT * FROM events", Verdict(query="SELECT * FROM events")),
    ("SET", "SET VARIABLE day = DATE '2026-11-01'", Verdict(query="SELECT DATE '2026-11-01'")),
    ("SET", "RESET VARIABLE day", Verdict()),
    ("CALL", "CALL ducklake_snapshots('lake')", Verdict(query="SELECT * FROM ducklake_snapshots('lake')")),
])
def test_queries_and_what_wraps_a_query_are_judged_as_queries(kind, text, verdict):
    assert classify(kind, text) == verdict


@pytest.mark.parametrize("kind, text, reason", [
    ("INSERT", "INSERT INTO events VALUES (1)", "INSERT is not a query"),
    ("SET", "SET memory_limit = '1TB'", "settings are fixed in a read-only session"),
    ("ATTACH", "ATTACH 'x.db'", "ATTACH is not a query"),
])
def test_everything_else_is_refused_with_the_reason(kind, text, reason):
    refused = classify(kind, text).refused
    assert refused is not None and reason in refused


def _call(name: str, *, table: bool = False) -> dict:
    """The shape json_serialize_sql gives a function call (a scalar or a table function)."""
    function = {"class": "FUNCTION", "type": "FUNCTION", "function_name": name, "children": []}
    return {"type": "TABLE_FUNCTION", "function": function} if table else function


def test_a_tree_is_refused_for_any_function_or_catalog_it_names_at_any_depth():
    allowed = frozenset({"count", "lower", "getenv"})
    nested = {"statements": [{"node": {"select_list": [_call("count")], "from_table": {
        "type": "SUBQUERY", "subquery": {"node": {"select_list": [_call("lower")],
                                                   "from_table": _call("read_csv", table=True)}}}}}]}
    assert "read_csv() is not one" in refusal(nested, allowed)
    assert refusal({"statements": [{"node": {"select_list": [_call("count")],
                                            "from_table": _call("snapshots", table=True)}}]}, allowed) is None
    # allowed by DuckDB's list, refused for its effect: the environment may hold the source's password
    assert "getenv() is not one" in refusal({"node": {"select_list": [_call("getenv")]}}, allowed)
    metadata = {"type": "BASE_TABLE", "catalog_name": "__ducklake_metadata_lake", "schema_name": "main"}
    assert "catalog database" in refusal({"node": {"from_table": metadata}}, allowed)
    assert refusal({"error": True, "error_message": "syntax"}, allowed).startswith("DuckDB cannot judge it")
