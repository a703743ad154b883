#!/usr/bin/env python3
"""Event pipeline CLI: ``uv run events_pipeline.py --help`` (installed: ``event-lake --help``)."""

import sys

from pipeline.process import interrupt_command, on_stop, stop_signal

if __name__ == "__main__":
    # first: a stop request from the first instant on ends the command with its last line, not
    # with Python's default (SIGTERM: a silent exit 143)
    on_stop(interrupt_command)
    try:
        from pipeline.cli.main import entry
    except KeyboardInterrupt:
        print("Stopped before the command started; nothing was done.", flush=True)
        sys.exit(128 + (stop_signal() or 2))
    sys.exit(entry())
