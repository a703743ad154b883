#!/usr/bin/env python3
"""Event pipeline CLI: ``uv run events_pipeline.py --help`` (installed: ``event-lake --help``)."""

import sys

from pipeline.cli.main import entry

if __name__ == "__main__":
    sys.exit(entry())
