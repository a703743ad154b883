"""Fault injection for the crash and shutdown tests, kept out of the product: the product has
no fault setting and no fault parameter; :func:`install` patches named product functions in
the process under test. A test that breaks a real CLI process runs it through
``tests/faulty_cli.py`` with ``EVENT_LAKE_TEST_FAULT=<point>`` (read there, never by the product):

- ``after-stage``: SIGKILL once a batch is staged with its manifest, nothing promoted
  (``pipeline.load.run.extract`` returns);
- ``before-commit``: SIGKILL inside the open DuckLake transaction, rows and state inserted, COMMIT
  not yet sent (the promote lock's fencing check is the last step before it);
- ``lose-lock``: the promote lock's connection dies just before that check (a catalog network
  blip), so the fencing must roll the batch back;
- ``slow-read``: every read slice sleeps :data:`SLOW_READ_SECONDS` in Postgres first, so a
  Spark job is surely running on the executors while a test cancels or kills it;
- ``drop-rows``: copy promotion leaves some rows out silently (a defect such as a source column
  shadowing one of validation's), for the identity check to catch;
- ``erase-after-commit``, ``erase-mid-move``, ``erase-after-rewrite``: SIGKILL once an erasure
  committed its deletes (nothing rewritten or expired yet), committed the first of its moves of the
  rows sharing a file with the subject's (one file per commit: the others not moved yet), or
  rewrote its files (nothing expired or deleted yet);
- ``duckdb-fatal``: the first compaction's merge transaction meets a real DuckDB INTERNAL error
  (a query DuckDB 1.5.5 answers with "Attempted to access index 0 within vector of size 0",
  duckdb/duckdb#22352), which invalidates the process's instance of the lake while the transaction
  is open: what aborted a scheduler in the field (exit 134) when its session was closed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger("tests.faults")
POINTS = ("after-stage", "before-commit", "lose-lock", "slow-read", "drop-rows", "erase-after-commit",
          "erase-mid-move", "erase-after-rewrite", "duckdb-fatal")
SLOW_READ_SECONDS = 30
SLOW_ENV = "EVENT_LAKE_TEST_SLOW_SECONDS"  # slow-read's sleep, when not SLOW_READ_SECONDS
ENV = "EVENT_LAKE_TEST_FAULT"


def install(point: str, patch: Callable[[object, str, Any], None] | None = None) -> None:
    """Break ``point`` in this process. ``patch(owner, name, value)`` sets an attribute (a
    pytest ``monkeypatch.setattr``, undone after the test); by default it is set for good."""
    if point not in POINTS:
        raise ValueError(f"{ENV}={point!r}: one of {', '.join(POINTS)}")
    setter = patch or setattr
    if point == "after-stage":
        from pipeline.load import run

        setter(run, "extract", _then_kill(run.extract, point))
    elif point in ("before-commit", "lose-lock"):
        from pipeline.lake import locks

        setter(locks.Lease, "check", _at_fencing(locks.Lease.check, point))
    elif point == "erase-mid-move":
        from pipeline.erase import erasure

        setter(erasure, "MOVE_BYTES", 1)
        setter(erasure, "transaction", _killing_after(erasure.transaction, "keep the first snapshots", point))
    elif point.startswith("erase-after-"):
        from pipeline.erase.erasure import Erasure

        step = point.removeprefix("erase-after-")
        setter(Erasure, step, _then_kill(getattr(Erasure, step), point))
    elif point == "duckdb-fatal":
        from pipeline.lake import maintain

        setter(maintain, "transaction", _fatal_inside(maintain.transaction, "merge adjacent data files"))
    elif point == "drop-rows":
        from pipeline.lake import validate

        setter(validate, "loadable_sql", _dropping(validate.loadable_sql))
    else:
        from pipeline.extract import spark_arrow, spark_engine

        setter(spark_arrow, "select_sql", _slow(spark_arrow.select_sql))
        setter(spark_engine, "jdbc_options", _slow_jdbc(spark_engine.jdbc_options))


def slow_query(query: str) -> str:
    """``query``, after a sleep in Postgres each time it runs (once per read slice)."""
    seconds = f"{float(os.environ.get(SLOW_ENV, SLOW_READ_SECONDS)):g}"  # a number, whatever was set
    return f"SELECT q.* FROM ({query}) q, (SELECT pg_sleep({seconds})) delay"


def _kill(point: str) -> None:
    log.warning("%s=%s: killing this process now", ENV, point)
    os.kill(os.getpid(), signal.SIGKILL)


def _then_kill(extract: Callable[..., Any], point: str) -> Callable[..., Any]:
    @functools.wraps(extract)
    def staged_then_killed(*args: Any, **kwargs: Any) -> Any:
        extract(*args, **kwargs)
        _kill(point)

    return staged_then_killed


def _killing_after(transaction: Callable[..., Any], marker: str, point: str) -> Callable[..., Any]:
    """``transaction``, killing the process once the first one whose message holds ``marker`` committed."""
    @contextlib.contextmanager
    def then_killed(lake: Any, message: str, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with transaction(lake, message, *args, **kwargs) as inside:
            yield inside
        if marker in message:
            _kill(point)

    return then_killed


# a query DuckDB 1.5.5 fails, some runs in a few hundred, with an INTERNAL error that invalidates its
# instance (duckdb/duckdb#22352)
_INTERNAL_ERROR = """WITH final_cols AS (SELECT i AS x FROM range(1) t(i)),
final_people AS (SELECT * FROM final_cols WHERE x >= 5000 UNION ALL
  SELECT * FROM final_cols WHERE NOT EXISTS (SELECT 1 FROM final_cols WHERE x >= 5000))
SELECT x, count() OVER () AS full_count FROM final_people ORDER BY x DESC LIMIT 5"""


def _fatal_inside(transaction: Callable[..., Any], marker: str) -> Callable[..., Any]:
    """``transaction``, meeting a real INTERNAL error inside the first one whose message holds ``marker``."""
    met: list[bool] = []

    @contextlib.contextmanager
    def then_fatal(lake: Any, message: str, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with transaction(lake, message, *args, **kwargs) as inside:
            if marker in message and not met:
                met.append(True)
                log.warning("%s=duckdb-fatal: an INTERNAL error inside %r now", ENV, message)
                for _ in range(100_000):
                    lake.con.execute(_INTERNAL_ERROR).fetchall()  # raises duckdb.InternalException
                raise AssertionError("DuckDB no longer fails the query of duckdb/duckdb#22352")
            yield inside

    return then_fatal


def _at_fencing(check: Callable[..., None], point: str) -> Callable[..., None]:
    @functools.wraps(check)
    def fenced(lease: Any) -> None:
        if lease.name.endswith(":promote"):
            if point == "before-commit":
                _kill(point)
            if lease.conn is not None:
                log.warning("%s=lose-lock: dropping the promote lock now", ENV)
                lease.conn.close()
        check(lease)

    return fenced


def _dropping(loadable_sql: Callable[..., str]) -> Callable[..., str]:
    """A promotion that loses rows silently (as a source column named like one of validation's did):
    every row whose id starts with a digit below 4 is left out, neither loaded nor quarantined."""
    @functools.wraps(loadable_sql)
    def dropping(*args: Any, **kwargs: Any) -> str:
        return f"SELECT * FROM ({loadable_sql(*args, **kwargs)}) WHERE CAST(event_id AS VARCHAR)[1] >= '4'"

    return dropping


def _slow(select_sql: Callable[..., str]) -> Callable[..., str]:
    @functools.wraps(select_sql)
    def slowed(*args: Any, **kwargs: Any) -> str:
        return slow_query(select_sql(*args, **kwargs))

    return slowed


def _slow_jdbc(jdbc_options: Callable[..., dict[str, str]]) -> Callable[..., dict[str, str]]:
    @functools.wraps(jdbc_options)
    def slowed(*args: Any, **kwargs: Any) -> dict[str, str]:
        options = jdbc_options(*args, **kwargs)
        inner = options["dbtable"].removeprefix("(").removesuffix(") AS src")
        return {**options, "dbtable": f"({slow_query(inner)}) AS src"}

    return slowed
