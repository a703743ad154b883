"""One DuckLake transaction = at most one snapshot, with its commit message.

Every write the pipeline makes on its own behalf (promotion, table setup, job history) goes
through :func:`transaction`, so none can forget the ROLLBACK that a failed statement needs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb

from pipeline.lake.session import Lake

AUTHOR = "event-lake"


@dataclass
class Transaction:
    con: duckdb.DuckDBPyConnection
    finished: bool = False

    def rollback(self) -> None:
        """End the transaction now without committing (e.g. it turned out to change nothing)."""
        self.con.execute("ROLLBACK")
        self.finished = True


@contextlib.contextmanager
def transaction(lake: Lake, message: str, extra_info: str | None = None) -> Iterator[Transaction]:
    """BEGIN, set the commit message, run the body, COMMIT; ROLLBACK on any exception."""
    con, lake_name = lake.con, lake.name
    con.execute("BEGIN")
    tx = Transaction(con)
    try:
        if extra_info is None:
            con.execute(f"CALL {lake_name}.set_commit_message(?, ?)", [AUTHOR, message])
        else:
            con.execute(f"CALL {lake_name}.set_commit_message(?, ?, extra_info => ?)",
                        [AUTHOR, message, extra_info])
        yield tx
        if not tx.finished:
            con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # a failed statement may have ended it already
            con.execute("ROLLBACK")
        raise


# what a read transaction found once, by its connection, for the length of that transaction: its
# view of the lake cannot change under it (a status asked which tables exist about 17 times)
_READS: dict[int, dict[str, object]] = {}


@contextlib.contextmanager
def one_read(lake: Lake) -> Iterator[None]:
    """The body's reads in one transaction: one view of the lake (DuckLake reads its catalog's
    snapshot once per transaction, so a plan's few reads cost one round of catalog queries, not
    one each), ended with ROLLBACK: a read commits nothing."""
    lake.execute("BEGIN")
    _READS[id(lake.con)] = {}
    try:
        yield
    finally:
        del _READS[id(lake.con)]
        with contextlib.suppress(duckdb.Error):
            lake.execute("ROLLBACK")


def read_memo(lake: Lake) -> dict[str, object] | None:
    """What the lake's open :func:`one_read` remembered so far (None: no read transaction is open,
    and nothing may be remembered: another process's commit changes what the next read sees)."""
    return _READS.get(id(lake.con))
