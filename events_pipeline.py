#!/usr/bin/env python3
"""Event pipeline CLI: ``uv run events_pipeline.py --help``."""

import os
import sys

from pipeline.cli.main import main

if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        # the reader closed the pipe (``… | head``): no traceback; exit as SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
