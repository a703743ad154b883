"""Start the local Spark driver's JVM from a class archive (Java's class-data sharing).

Most of a local Spark session's start is its JVM loading, parsing and verifying Spark's classes.
Java 17 can write the classes a JVM loaded into an archive as that JVM exits
(``-XX:ArchiveClassesAtExit``) and map the archive on later starts (``-XX:SharedArchiveFile``):
on the 2-core machine a session then starts in 4.9–5.9 s instead of 7.1–8.3 s and its first job
takes 1.5–1.8 s instead of 2.6–3.1 s (README, Performance).

The first local session of a machine (per user) records the archive and, as its process exits,
waits for its JVM to write it (5–12 s, once); later sessions map it. The archive's name carries a
digest of what it depends on — the java binary and Spark's version (its jars are the class
path) — so another Java or Spark records a new one. A JVM that cannot use an archive starts without it
(``-Xshare:auto``, the default), and class-sharing logs are off, so an archive never changes what
a run prints. One process records at a time (a lock); a recording cut short (a killed process)
leaves a partial file the next recorder replaces. Long-lived processes (the scheduler) only map:
their exit must not wait for a recording.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import fasteners

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

QUIET = "-Xlog:cds*=off"  # the JVM prints class-sharing warnings on stdout: never into a run's output
# A damaged archive crashes the JVM as it starts, and a crash's header goes to stdout whatever the
# options say: a JVM that maps an archive reports no fatal error (the start is tried again without)
MAP = "-XX:+SuppressFatalErrorMessage"
RECORD_SECONDS = 180  # at most this long for the exiting JVM to write its archive


@dataclass(frozen=True)
class Recording:
    """This process records the archive: at exit, its JVM writes ``partial``, renamed to ``path``."""

    path: Path
    partial: Path
    lock: fasteners.InterProcessLock

    def finish_at_exit(self, session: SparkSession) -> None:
        atexit.register(self._finish, session)

    def _finish(self, session: SparkSession) -> None:
        from pyspark import SparkContext

        try:
            gateway = SparkContext._gateway
            process = getattr(gateway, "proc", None)
            if process is None or process.poll() is not None:
                return  # gone already (killed): nothing was written
            log.info("writing the JVM class archive %s (once per machine; later Spark starts are faster)",
                     self.path)
            with contextlib.suppress(Exception):
                session.stop()
            process.stdin.close()  # the gateway JVM exits when its stdin closes, writing the archive
            # only a JVM that finished cleanly wrote a whole archive: a truncated one would crash
            # every later start (see ArchiveUse.discard, the net under this)
            clean = process.wait(RECORD_SECONDS) == 0
            if clean and self.partial.exists() and self.partial.stat().st_size > 0:
                os.replace(self.partial, self.path)
        except Exception as exc:  # noqa: BLE001  an optimisation: a failed recording costs the next start only
            log.info("no JVM class archive written (%s)", exc)
        finally:
            self.lock.release()


@dataclass(frozen=True)
class ArchiveUse:
    """What a driver JVM does with the archive: the options that say it, the archive it maps (if
    any), the recording this process finishes at exit (if it records)."""

    options: str = ""
    mapped: Path | None = None
    recording: Recording | None = None

    def discard(self) -> None:
        """The JVM did not start while mapping :attr:`mapped`: a damaged archive crashes it at
        every start (seen: SIGBUS on a truncated file), so it goes, to be recorded again."""
        if self.mapped is not None:
            log.warning("Spark's JVM did not start with the class archive %s: removed; starting without it",
                        self.mapped)
            self.mapped.unlink(missing_ok=True)


def driver_options(folder: Path | None, java: str | None, spark_version: str, may_record: bool) -> ArchiveUse:
    """How this process's driver JVM uses the archive in ``folder``: maps it if there is one,
    else records one (``may_record`` and no other process recording), else none. None either
    when archives are off (``folder`` None) or there is no java to key them by."""
    if folder is None or java is None:
        return ArchiveUse()
    path = folder / f"spark-{spark_version}-java-{_digest(java)}.jsa"
    if path.exists():
        return _mapping(path)
    if not may_record:
        return ArchiveUse()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = fasteners.InterProcessLock(str(path.with_suffix(".lock")))
        if not lock.acquire(blocking=False):
            return ArchiveUse()  # another process is recording it
    except OSError as exc:  # a read-only home: start without
        log.info("no JVM class archive in %s (%s)", folder, exc)
        return ArchiveUse()
    if path.exists():  # recorded while this process waited for the folder
        lock.release()
        return _mapping(path)
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)  # a recording cut short
    return ArchiveUse(f"-XX:ArchiveClassesAtExit={partial} {QUIET}",
                      recording=Recording(path, partial, lock))


def _mapping(path: Path) -> ArchiveUse:
    return ArchiveUse(f"-XX:SharedArchiveFile={path} {QUIET} {MAP}", mapped=path)


def _digest(java: str) -> str:
    real = Path(java).resolve()
    stat = real.stat()
    material = f"{real}|{stat.st_size}|{stat.st_mtime_ns}"
    return hashlib.sha256(material.encode()).hexdigest()[:16]
