"""A commit is made in one lake session: its tables are that session's views, never another's
(a table holds its lake; it is no lake of its own)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pipeline.lake.session import Lake
from pipeline.promote.commit import LakeCommit
from pipeline.settings import StorageOptions
from pipeline.settings.catalog import CatalogSpec


def _lake(con: duckdb.DuckDBPyConnection) -> Lake:
    return Lake(con, "lake", "ops", "/tmp/data/", StorageOptions(), CatalogSpec("sqlite", path=Path("c")))


def test_a_commits_tables_share_one_session_and_the_commit_is_made_in_it():
    with duckdb.connect() as one, duckdb.connect() as other:
        lake = _lake(one)
        commit = LakeCommit([lake.table_named("sessions"), lake.table_named("events")])
        assert commit.lake is lake and [t.name for t in commit.tables] == ["events", "sessions"]
        # another Lake object over the same connection is the same session
        assert LakeCommit([lake.table_named("a"), _lake(one).table_named("b")]).lake.con is one
        with pytest.raises(ValueError, match="views of one lake session"):
            LakeCommit([lake.table_named("sessions"), _lake(other).table_named("events")])
        with pytest.raises(ValueError, match="at least one table"):
            LakeCommit([])
