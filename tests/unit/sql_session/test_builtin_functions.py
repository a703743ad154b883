"""The judge's list of DuckDB's own functions, written down for the pinned DuckDB, is what that
DuckDB lists: a DuckDB upgrade fails here until the list is written again, instead of a read-only
session refusing a new function (or allowing one an upgrade moved into an extension)."""

import duckdb

from pipeline.sql_session import builtin_functions
from pipeline.sql_session.query import allowed_scalars


def test_the_written_list_is_what_this_duckdb_lists():
    assert duckdb.__version__ == builtin_functions.DUCKDB_VERSION, (
        "DuckDB changed: run python -m pipeline.sql_session.builtin_functions")
    listed = builtin_functions.listed()
    assert listed == builtin_functions.NAMES, sorted(builtin_functions.NAMES ^ listed)
    assert "json_extract_string" in allowed_scalars() and "postgres_execute" not in allowed_scalars()
