#!/usr/bin/env python3
"""The pipeline's CLI with one fault installed (tests/faults.py), for tests that break a real
process: ``EVENT_LAKE_TEST_FAULT=after-stage python tests/faulty_cli.py --run``. Without the
variable it is the plain CLI."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: tests.faults

from pipeline.cli.main import entry
from tests import faults

if __name__ == "__main__":
    if point := os.environ.get(faults.ENV):
        faults.install(point)
    sys.exit(entry())
