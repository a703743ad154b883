"""What a message may send the user to do, named once; the words are the front end's.

The library (everything outside :mod:`pipeline.cli`) never spells a command-line flag. A message
that tells the user to verify the lake holds :data:`VERIFY`, and its text is chosen when the
message is made, by the voice the front end installed with :func:`speak`: the command line says
``--verify``; a notebook or an orchestrator that imports the library gets the library's own names
(``pipeline.load.verify``). So ``lake/`` and ``ops/`` can be used without CLI wording in their
errors, and a renamed flag is renamed in one place (``pipeline/cli/voice.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Action:
    """Something the user can do, with how a library user does it."""

    key: str  # neutral name; the command line's voice maps it to a flag
    api: str  # how to do it from Python

    def __str__(self) -> str:
        return _voice.say(self)

    def command(self) -> str:
        """The whole command that does it, as the user would type it."""
        return _voice.command(self)


class Voice(Protocol):
    def say(self, action: Action) -> str: ...

    def command(self, action: Action) -> str: ...


class LibraryVoice:
    """The library's own words: the Python that does it."""

    def say(self, action: Action) -> str:
        return action.api

    def command(self, action: Action) -> str:
        return action.api


_voice: Voice = LibraryVoice()


def speak(voice: Voice) -> None:
    """Make messages from now on speak in ``voice`` (the front end calls it once, at start)."""
    global _voice
    _voice = voice


RUN = Action("run", "Pipeline.run()")
STATUS = Action("status", "Pipeline.status()")
RETRY_FAILED = Action("retry_failed", "Pipeline.retry_failed()")
RECONCILE = Action("reconcile", "Pipeline.reconcile()")
SINCE = Action("since", "since=")
VERIFY = Action("verify", "pipeline.load.verify")
REPAIR = Action("repair", "Pipeline.repair()")
SQL = Action("sql", "a SQL session (pipeline.sql_session.query)")
WRITE = Action("write", "write=True")
PARAM = Action("param", "params=")
SNAPSHOTS = Action("snapshots", "snapshots()")
AT_VERSION = Action("at_version", "at_version=")
AT_TIME = Action("at_time", "at_time=")
ENGINE = Action("engine", "engine=")
SPARK_CONF = Action("spark_conf", "SPARK_CONF")
METRICS_PORT = Action("metrics_port", "METRICS_PORT")
DOCTOR = Action("doctor", "pipeline.ops.doctor")
TIMEOUT = Action("timeout", "timeout=")
MEMORY = Action("memory", "memory=")
VERBOSE = Action("verbose", "DEBUG logging")
ERASE = Action("erase", "Pipeline.erase()")
LEAVE_IMAGE = Action("leave_image", "LEAVE_IMAGE=true")
ALL = (ERASE, LEAVE_IMAGE, RUN, STATUS, RETRY_FAILED, RECONCILE, SINCE, VERIFY, REPAIR, SQL, WRITE, PARAM,
       SNAPSHOTS, AT_VERSION, AT_TIME, ENGINE, SPARK_CONF, METRICS_PORT, DOCTOR, TIMEOUT, MEMORY, VERBOSE)
