"""The command line's voice: the flag for each :mod:`pipeline.actions` action, so messages from
the library name what the user types here (``--retry-failed``, ``event-lake --retry-failed``)."""

from __future__ import annotations

from pipeline import actions, invocation
from pipeline.actions import Action

# the one place a library action becomes a flag (tests/unit/test_docs.py: the parser defines each)
FLAGS = {
    actions.RUN: "--run", actions.STATUS: "--status", actions.RETRY_FAILED: "--retry-failed",
    actions.RECONCILE: "--reconcile", actions.SINCE: "--since", actions.VERIFY: "--verify",
    actions.REPAIR: "--repair", actions.LEAVE_IMAGE: "--leave-image",
    actions.SQL: "--sql", actions.WRITE: "--write", actions.PARAM: "--param",
    actions.SNAPSHOTS: "--snapshots", actions.AT_VERSION: "--at-version", actions.AT_TIME: "--at-time",
    actions.ENGINE: "--engine", actions.SPARK_CONF: "--spark-conf", actions.METRICS_PORT: "--metrics-port",
    actions.DOCTOR: "--doctor", actions.TIMEOUT: "--timeout", actions.MEMORY: "--memory",
    actions.VERBOSE: "--verbose", actions.ERASE: "--erase",
}
LIMIT = "--limit"  # named by the CLI's own messages only


class Flags:
    def say(self, action: Action) -> str:
        return FLAGS[action]

    def command(self, action: Action) -> str:
        return command(FLAGS[action])


def command(*args: str) -> str:
    """A pipeline command as the user would type it (``event-lake --retry-failed``)."""
    return " ".join([invocation.pipeline_command(), *args])


def install() -> None:
    """From now on, library messages name flags."""
    actions.speak(Flags())
