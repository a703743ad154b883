"""The benches' reference, DuckDB alone loading the source into a lake the pipeline made, keeps
working as the lake's tables change: it inserted five values into a table that had gained a sixth
column (known since), and every first-load bench failed before measuring anything."""

from __future__ import annotations

from bench.common import run_reference
from tests.helpers import add_events, assert_lake_equals_source


def test_the_benches_reference_loads_the_source_into_the_lake(settings, lake_env):
    add_events(settings, 40, seed=5)
    measured = run_reference(lake_env)
    assert measured["load s"] >= 0 and measured["wall s"] > 0
    assert_lake_equals_source(settings, expected_rows=40)
