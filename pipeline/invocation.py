"""How this process was started: the installed tools (``event-lake``, ``event-lake-gen``) or the
checkout's scripts (``uv run events_pipeline.py``). Help texts and hints name the command the
user actually has, not the other one."""

from __future__ import annotations

import os
import sys

INSTALLED = ("event-lake", "event-lake-gen")


def installed() -> bool:
    return os.path.basename(sys.argv[0]) in INSTALLED


def pipeline_command() -> str:
    return "event-lake" if installed() else "events_pipeline.py"


def generator_command() -> str:
    """What to run to write events, as the user would type it."""
    return "event-lake-gen" if installed() else "uv run insert_event_data_loop.py"
