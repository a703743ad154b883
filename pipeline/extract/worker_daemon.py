"""The Python worker daemon of a local Spark (``spark.python.daemon.module``): pyspark's own
daemon, started the way a fork server should be.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's) first on its workers' path. Python
caches no bytecode for a zip, so every daemon compiled pyspark from source — 0.6 CPU-s per engine
start — and every worker it forked compiled again the modules a task imports after the fork, then
ran a full ``gc.collect()`` over them after each task (py-spy over the test suite: 150 CPU-s of
compiling and 55 of collecting in the workers). Here the daemon:

- imports pyspark and py4j from this environment's install (byte-compiled) when it holds the very
  version the zip does, keeping the zips behind it (any other install: the zips, as Spark meant);
- imports what a slice task needs before it forks (pyarrow, the task's own module), so each
  worker starts with it, and freezes those objects out of the collector's sight (``gc.freeze``:
  the collector never moves them, and their pages stay shared between the forks).

Only a local master uses it (:func:`.spark_session.build_session`): there the workers run this
interpreter, which can import this package; a cluster's executors keep pyspark's daemon.
"""

from __future__ import annotations

import gc
import sys
import zipfile
from pathlib import Path

# each archive Spark puts on the path, and the file that says its version
ARCHIVES = {"pyspark.zip": "pyspark/version.py", "py4j-": "py4j/version.py"}


def _same_version(archive: str, version_file: str) -> bool:
    """Whether a non-archive entry of the path holds the archive's package at the archive's version."""
    try:
        with zipfile.ZipFile(archive) as zipped:
            packed = zipped.read(version_file)
    except (OSError, KeyError, zipfile.BadZipFile):
        return False
    for entry in sys.path:
        if entry.endswith(".zip") or not entry:
            continue
        installed = Path(entry) / version_file
        try:
            if installed.read_bytes() == packed:
                return True
        except OSError:
            continue
    return False


def installed_first() -> None:
    """Move each of Spark's archives behind the path entries when they hold the same version."""
    for entry in list(sys.path):
        name = Path(entry).name
        version_file = next((file for prefix, file in ARCHIVES.items() if name.startswith(prefix)
                             and name.endswith(".zip")), None)
        if version_file is not None and _same_version(entry, version_file):
            sys.path.remove(entry)
            sys.path.append(entry)


def main() -> None:
    installed_first()
    from pyspark import daemon, worker  # noqa: F401  the worker's modules, shared by every fork

    from pipeline.extract import slice_task  # noqa: F401  what a slice task imports, likewise

    gc.freeze()
    daemon.manager()


if __name__ == "__main__":
    main()
