"""Pure policy of the scheduler: how long a failing job waits (decided by the error's type),
and how long shutdown may take.

* :class:`~pipeline.errors.TransientError` (a service down or busy) and errors we cannot
  classify back off exponentially — 0, 1, 3, 7 … extra intervals, capped at :data:`MAX_BACKOFF`.
* :class:`~pipeline.errors.TerminalError` (a setting, the data or the code needs a fix), and SQL
  that DuckDB cannot parse or bind (:data:`CODE_ERRORS`), waits
  :data:`FIX_RETRY` (or one interval, if longer) at once: retrying every tick would fail the
  same way and fill the history with noise, but the fix is made outside the process — a table
  created, a grant given — and a scheduler that waited its 6-h cap after a fresh stack's first
  load found no source table yet went on not loading for hours after the table came.
* :class:`~pipeline.errors.SourceTableMissing` backs off like a service down, up to
  :data:`FIX_RETRY`: in a stack started at once the application creates its table moments after the
  pipeline's first load, which then waited the whole 10 minutes.
"""

from __future__ import annotations

from datetime import timedelta

import duckdb

from pipeline.errors import SourceTableMissing, TerminalError

# SQL that DuckDB cannot parse or bind: a bug, or a lake table changed by hand. No retry outlives it,
# and the log must not call it temporary (a ParserError was)
CODE_ERRORS = (duckdb.ParserException, duckdb.BinderException)
MAX_BACKOFF = timedelta(hours=6)
FIX_RETRY = timedelta(minutes=10)  # how soon a failure that needs a fix is tried again
# a follower loads every few seconds: after an outage of hours it must not wait hours more
FOLLOW_MAX_BACKOFF = timedelta(seconds=30)
SHUTDOWN_SECONDS = 60  # bound on exit after SIGTERM, printed in --help
CANCEL_EVERY_SECONDS = 0.5  # during shutdown, Spark jobs are cancelled this often


def backoff_delay(every: timedelta, failures: int, cap: timedelta = MAX_BACKOFF) -> timedelta:
    """Extra wait after ``failures`` consecutive failures: 0, 1, 3, 7 … intervals, capped."""
    if failures <= 1:
        return timedelta(0)
    return min(every * (2 ** (failures - 1) - 1), max(cap, every))


def retry_delay(every: timedelta, failures: int, error: BaseException,
                cap: timedelta = MAX_BACKOFF) -> timedelta:
    """Extra wait before the next attempt after ``error`` ended the ``failures``-th run in a row."""
    if isinstance(error, SourceTableMissing):
        return backoff_delay(every, failures, min(cap, FIX_RETRY))
    if needs_a_fix(error):
        return max(min(cap, FIX_RETRY), every)
    return backoff_delay(every, failures, cap)


def sooner_than_the_interval(every: timedelta, error: BaseException) -> timedelta | None:
    """When the next attempt after ``error`` comes before the job's next interval, how long after
    the failure (None: at a tick of the interval, as :func:`retry_delay` says). A source table the
    application has not made yet is looked for again at most :data:`FIX_RETRY` later, however long
    the interval: with LOAD_EVERY=1h a stack's first load, run before the table existed, was tried
    again only an hour later."""
    return FIX_RETRY if isinstance(error, SourceTableMissing) and every > FIX_RETRY else None


def needs_a_fix(error: BaseException) -> bool:
    return isinstance(error, (TerminalError, *CODE_ERRORS))
