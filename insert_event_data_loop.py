#!/usr/bin/env python3
"""Write realistic fake events into Postgres: ``uv run insert_event_data_loop.py --help``
(installed: ``event-lake-gen --help``)."""

import sys

from generators.cli import entry

if __name__ == "__main__":
    sys.exit(entry())
