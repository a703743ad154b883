"""The read-only session's statement judge, on its own (pure): what USE may switch to."""

from __future__ import annotations

import pytest

from pipeline.lake.statement_judge import classify, use_refusal, use_target

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
