"""The running scheduler's published state (next run times), read by ``--status``."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from pipeline.settings import Settings

log = logging.getLogger(__name__)


def state_path(settings: Settings) -> Path:
    """Where a running scheduler publishes its next run times for ``--status``."""
    return settings.home / "scheduler.json"


def write_state(settings: Settings, state: dict[str, Any]) -> None:
    """Replace the state file atomically (best effort: a full disk must not stop the jobs)."""
    path = state_path(settings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not write %s: %s", path, exc)


def remove_state(settings: Settings) -> None:
    state_path(settings).unlink(missing_ok=True)


def read_state(settings: Settings) -> dict[str, Any] | None:
    """The running scheduler's state file, or None when no scheduler is alive."""
    try:
        state = json.loads(state_path(settings).read_text())
        os.kill(int(state["pid"]), 0)
    except (OSError, ValueError, KeyError):
        return None
    return state
