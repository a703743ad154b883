"""Running schedulers' published state (next run times), read by ``--status``.

Each scheduler process writes its own file, ``<home>/schedulers/<pid>.json``, so two schedulers
sharing a home (one started by mistake) never overwrite or remove each other's state; a file
whose process is gone (killed without cleanup) is ignored.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from pipeline.settings import Settings

log = logging.getLogger(__name__)


def state_dir(settings: Settings) -> Path:
    return settings.home / "schedulers"


def state_path(settings: Settings, pid: int | None = None) -> Path:
    """Where the scheduler ``pid`` (default: this process) publishes its next run times."""
    return state_dir(settings) / f"{pid or os.getpid()}.json"


def write_state(settings: Settings, state: dict[str, Any]) -> None:
    """Replace this process's state file atomically (best effort: a full disk must not stop the jobs)."""
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


def running(settings: Settings) -> list[dict[str, Any]]:
    """The state of every scheduler process alive on this machine, oldest pid first."""
    found = []
    for path in sorted(state_dir(settings).glob("*.json")):
        try:
            state = json.loads(path.read_text())
            os.kill(int(state["pid"]), 0)
        except (OSError, ValueError, KeyError):
            continue
        found.append(state)
    return found


def read_state(settings: Settings) -> dict[str, Any] | None:
    """One running scheduler's state (with ``running``: how many are up), or None."""
    alive = running(settings)
    return {**alive[0], "running": len(alive)} if alive else None
