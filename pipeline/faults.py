"""Crash injection for the crash-safety tests: ``EVENT_LAKE_FAULT=<point>`` kills the process.

Points: ``after-stage`` (manifest written, nothing promoted) and ``before-commit`` (rows and
state inserted inside the open DuckLake transaction, COMMIT not yet sent). SIGKILL gives the
process no chance to clean up, exactly like an OOM kill or a power cut.
"""

from __future__ import annotations

import logging
import os
import signal

from pipeline.settings import Settings


def maybe_crash(settings: Settings, point: str) -> None:
    if settings.fault == point:
        logging.getLogger(__name__).warning("EVENT_LAKE_FAULT=%s: killing this process now", point)
        os.kill(os.getpid(), signal.SIGKILL)
