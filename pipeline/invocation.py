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


# The command-line flags that messages from below the command line send users to, named here
# once (tests/unit/test_docs.py checks that pipeline.cli.parser defines each of them).
RUN, STATUS, RETRY_FAILED, VERBOSE = "--run", "--status", "--retry-failed", "--verbose"
RECONCILE, SINCE, VERIFY = "--reconcile", "--since", "--verify"
SQL, WRITE, PARAM, SNAPSHOTS = "--sql", "--write", "--param", "--snapshots"
AT_VERSION, AT_TIME = "--at-version", "--at-time"
ENGINE, SPARK_CONF, METRICS_PORT = "--engine", "--spark-conf", "--metrics-port"
DOCTOR, TIMEOUT, LIMIT = "--doctor", "--timeout", "--limit"
FLAGS = (RUN, STATUS, RETRY_FAILED, VERBOSE, RECONCILE, SINCE, VERIFY, SQL, WRITE, PARAM, SNAPSHOTS,
         AT_VERSION, AT_TIME, ENGINE, SPARK_CONF, METRICS_PORT, DOCTOR, TIMEOUT, LIMIT)


def command(*args: str) -> str:
    """A pipeline command as the user would type it (``event-lake --retry-failed``)."""
    return " ".join([pipeline_command(), *args])
