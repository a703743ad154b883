"""Crash injection for the crash-safety tests: ``EVENT_LAKE_FAULT=<point>`` kills the process.

Points: ``after-stage`` (manifest written, nothing promoted) and ``before-commit`` (rows and
state inserted inside the open DuckLake transaction, COMMIT not yet sent). SIGKILL gives the
process no chance to clean up, exactly like an OOM kill or a power cut.
"""

from __future__ import annotations

import os
import signal


def maybe_crash(point: str) -> None:
    if os.environ.get("EVENT_LAKE_FAULT") == point:
        print(f"EVENT_LAKE_FAULT={point}: killing this process now", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
