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
from typing import TypedDict

log = logging.getLogger(__name__)


class PlannedJob(TypedDict):
    every: str
    next_run: str | None
    last_status: str | None
    last_finished: str | None
    consecutive_failures: int


class SchedulerState(TypedDict, total=False):
    """One scheduler's state file (JSON); ``running`` is added when read: how many are up."""

    pid: int
    run_id: str
    updated_at: str
    mode: str  # "scheduler" or "follower"
    jobs: dict[str, PlannedJob]
    running: int


class SchedulerStates:
    """The state files of the schedulers sharing one ``EVENT_LAKE_HOME``."""

    def __init__(self, home: Path) -> None:
        self.folder = home / "schedulers"

    def path(self, pid: int | None = None) -> Path:
        """Where the scheduler ``pid`` (default: this process) publishes its next run times."""
        return self.folder / f"{pid or os.getpid()}.json"

    def write(self, state: SchedulerState) -> None:
        """Replace this process's state file atomically (best effort: a full disk must not stop the jobs)."""
        path = self.path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state, indent=2))
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("could not write %s: %s", path, exc)

    def remove(self) -> None:
        self.path().unlink(missing_ok=True)

    def running(self) -> list[SchedulerState]:
        """The state of every scheduler process alive on this machine, oldest pid first."""
        found = []
        for path in sorted(self.folder.glob("*.json")):
            try:
                state: SchedulerState = json.loads(path.read_text())
                os.kill(int(state["pid"]), 0)
            except (OSError, ValueError, KeyError):
                continue
            found.append(state)
        return found

    def read(self) -> SchedulerState | None:
        """One running scheduler's state (with ``running``: how many are up), or None."""
        alive = self.running()
        return SchedulerState(**alive[0], running=len(alive)) if alive else None
