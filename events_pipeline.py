#!/usr/bin/env python3
"""Event pipeline CLI: ``uv run events_pipeline.py --help``."""

import sys

from pipeline.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
