#!/usr/bin/env python3
"""Write realistic fake events into Postgres: ``uv run insert_event_data_loop.py --help``."""

import sys

from generators.cli import main

if __name__ == "__main__":
    sys.exit(main())
