"""Error types shared by every stage, and the one place database errors are classified.

Whether a retry can help is part of the type, never of the message text: the scheduler
retries :class:`TransientError` with backoff and reports :class:`TerminalError` as needing
a fix. The hint (what to do about it) is an attribute, so the CLI decides how to show it.
"""

from __future__ import annotations

import re
from typing import Protocol


class Report(Protocol):
    """What every step's report offers (a load's :class:`~pipeline.load.report.RunReport`, …)."""

    def as_dict(self) -> dict[str, object]: ...
    def summary(self) -> str: ...


class PipelineError(Exception):
    """Base class for every error the product reports to a user in plain words.

    An error that ends a step that had done part of its work carries that step's name and its
    report so far (``step``, ``partial``: a load that promoted two batches before the catalog went
    away says which), as dlt's ``PipelineStepFailed`` does; the error's class still says what failed
    and whether trying again can help."""

    hint: str = ""
    step: str | None = None
    partial: Report | None = None

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint or self.hint

    def during(self, step: str, partial: Report) -> PipelineError:
        """Record the step this error ended and what it had done (returns self, to re-raise)."""
        self.step, self.partial = step, partial
        return self


class TerminalError(PipelineError):
    """Retrying without a change (config, code, data) will fail the same way."""


class TransientError(PipelineError):
    """A service was busy or unreachable; the same call may succeed later."""


class ConfigError(TerminalError):
    """A setting is missing or malformed."""


class SourceAccessDenied(TerminalError):
    """The source role may not read the source table (no SELECT, or no USAGE on its schema)."""


class SourceTableMissing(TerminalError):
    """The source table does not exist: a setting to fix, or an application that has not created it
    yet (a stack started at once), so it is looked for again sooner than other fixes."""


class LakeNotCreated(TerminalError):
    """A read-only open found no lake in the catalog: nothing has run yet (a state, for --status)."""


class SourceUnavailable(TransientError):
    """The source Postgres could not be reached."""


class CatalogUnavailable(TransientError):
    """The DuckLake catalog database could not be reached."""


class EngineUnavailable(TransientError):
    """Spark could not be started or reached (a JVM that failed to start, a Connect server that
    is down or restarting): the scheduler retries with backoff."""


class LockBusy(TransientError):
    """Another process holds the lock for this job."""


class StorageUnavailable(TransientError):
    """The object store holding staged batches or the lake's data could not be reached."""


class StorageFull(TransientError):
    """A disk (staging, the data path) is full: freeing space and running again loads everything."""


class ShutdownRequested(PipelineError):
    """The process was asked to stop (SIGTERM/SIGINT) before work started; nothing was done."""


MASK = "***"

_TRANSIENT_MARKERS = ("connection refused", "unable to connect", "could not connect", "timeout", "timed out",
                      "no route",
                      "server closed", "could not translate host", "the database system is starting",
                      # psycopg's own lookup (a container network's DNS answered EAI_AGAIN once a
                      # neighbour stopped): a name that resolves again later, as libpq's above
                      "failed to resolve host", "temporary failure in name resolution",
                      "the database system is shutting down", "too many clients", "terminating connection",
                      "connection reset", "broken pipe", "connection to server", "ssl syscall",
                      "i/o error occurred while sending to the backend", "connection attempt failed",
                      "connection has been closed", "couldn't connect to the database",
                      "failed_jdbc.connection",
                      # a pooled catalog connection left inside a transaction that failed as the catalog
                      # restarted ("Failed to get data file list from DuckLake: Current transaction is
                      # aborted"): the failed session drops its instance and the next attaches anew
                      "current transaction is aborted",
                      # DuckDB's words when the catalog's connection died inside COMMIT (an empty reason):
                      # whether it committed is known at the retry, which finds the batch recorded or not
                      'failed to commit: failed to execute query "rollback"')
# a server that answers, refusing the settings: no retry helps (libpq puts these after "connection to
# server at … failed:", which would otherwise read as an outage)
_TERMINAL_MARKERS = ("does not exist", "password authentication failed", "no pg_hba.conf entry",
                     "authentication failed", "permission denied")


_DISK_FULL_MARKERS = ("no space left on device", "disk quota exceeded", "errno 28", "could not extend file",
                      "not enough space on the disk")


def is_disk_full(cause: BaseException | str) -> bool:
    return any(marker in str(cause).lower() for marker in _DISK_FULL_MARKERS)


def is_transient(cause: BaseException | str) -> bool:
    """True for failures a retry can outlive (a server down, restarting or busy; a full disk
    once space is freed), False for wrong settings (unknown database, bad password) that need
    a fix."""
    text = str(cause).lower()
    if any(marker in text for marker in _TERMINAL_MARKERS):
        return False
    return any(marker in text for marker in _TRANSIENT_MARKERS) or is_disk_full(text)


def disk_full(cause: BaseException, where: str, setting: str) -> StorageFull:
    """A full disk, said plainly: which setting's folder, and that nothing was lost."""
    return StorageFull(f"No space left on the disk holding {setting}={where} "
                       f"({first_line(scrub_secrets(_disk_full_line(cause)))}).",
                       f"Free space there (or point {setting} at a larger disk); partial files were "
                       "removed and nothing was promoted, so the next run loads everything.")


def _disk_full_line(cause: BaseException) -> str:
    """The line of a (Java) error text that names the full disk, else its first line."""
    lines = str(cause).splitlines()
    return next((line.strip() for line in lines if is_disk_full(line)), first_line(cause))


def scrub_secrets(message: str) -> str:
    """Mask passwords in any DSN-looking text (URL userinfo or ``password=`` pairs) and the
    token of a Spark Connect address (``sc://host:15002/;token=…``)."""
    message = re.sub(r"(://[^:/@\s]*):[^@\s]*@", rf"\1:{MASK}@", message)
    message = re.sub(r"(;\s*token\s*=\s*)[^;\s)'\"]+", rf"\1{MASK}", message, flags=re.I)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", rf"\1{MASK}", message, flags=re.I)


def service_error(cause: BaseException, message: str, *, unavailable: type[TransientError],
                  transient_hint: str, terminal_hint: str) -> PipelineError:
    """Translate a driver error from a service into our types: ``unavailable`` (transient)
    when the service could not be reached, :class:`TerminalError` when a setting is wrong.
    The driver's text is appended with any password masked."""
    text = f"{message}: {scrub_secrets(str(cause)).strip()}"
    if is_transient(cause):
        return unavailable(text, transient_hint)
    return TerminalError(text, terminal_hint)


def first_line(error: BaseException | str) -> str:
    """The first line of an error's text (driver errors carry pages of context below it; a
    catalog query's SQL text is left out, its reason kept). A
    Spark task's Python error starts with a line that says only that, and ends with the
    worker's own ``SomeError: what happened`` line after a traceback: that line it is."""
    text = _QUERY_TEXT.sub(r"\1(…): ", str(error).strip())
    if not text:
        return type(error).__name__
    first = text.splitlines()[0]
    if "exception was thrown from the python worker" in first.lower():
        found = _WORKER_ERROR.findall(text)
        if found:
            return found[-1].strip()
    return first


# DuckDB's Postgres and SQLite catalogs say ``Failed to execute query "<the SQL>": <the reason>``:
# the SQL runs over many lines, so a first line would end inside it and drop the reason (e.g.
# "server closed the connection unexpectedly"); the SQL goes, the reason stays. Greedy: up to
# the last quote-colon, which ends the query
_QUERY_TEXT = re.compile(r'(Failed to execute query )".*": ', re.DOTALL)
_WORKER_ERROR = re.compile(r"^\s*((?:[\w.]+\.)?\w*(?:Error|Exception|Warning): \S.*)$", re.MULTILINE)
