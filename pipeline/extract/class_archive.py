"""Start the local Spark driver's JVM from a class archive (Java's class-data sharing).

Most of a local Spark session's start is its JVM loading, parsing and verifying Spark's classes.
Java 17 can write the classes a JVM loaded into an archive as that JVM exits
(``-XX:ArchiveClassesAtExit``) and map the archive on later starts (``-XX:SharedArchiveFile``):
on the 2-core machine a session then starts in 4.9–5.9 s instead of 7.1–8.3 s and its first job
takes 1.5–1.8 s instead of 2.6–3.1 s (docs/performance.md).

The first local session of a machine (per user) records the archive: as its process exits, its
JVM writes it (5–12 s, once) while a small detached process waits for that JVM and puts the
archive in place, so the command returns at once; later sessions map it. The archive's name carries a
digest of what it depends on — the java binary and Spark's version (its jars are the class
path) — so another Java or Spark records a new one. A JVM that cannot use an archive starts without it
(``-Xshare:auto``, the default), and class-sharing logs go to a file beside the archive, never
to a run's output. An archive is put in place only when the JVM's log says it was written whole.
One process records at a time (a lock); a recording cut short (a killed JVM) leaves a partial
file a later recorder removes. Long-lived processes (the scheduler) only map:
their exit must not wait for a recording.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import secrets
import subprocess
import sys
import time
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
WRITTEN = "Written dynamic archive"  # what the JVM logs once the whole archive is on disk


@dataclass(frozen=True)
class Recording:
    """This process records the archive: at exit, its JVM writes ``partial`` (logging to
    ``journal``), renamed to ``path`` once written whole."""

    path: Path
    partial: Path
    lock: fasteners.InterProcessLock

    @property
    def journal(self) -> Path:
        return journal_of(self.partial)

    def finish_at_exit(self, session: SparkSession) -> None:
        atexit.register(self._finish, session)

    def _finish(self, session: SparkSession) -> None:
        from pyspark import SparkContext

        try:
            gateway = SparkContext._gateway
            process = getattr(gateway, "proc", None)
            if process is None or process.poll() is not None:
                return  # gone already (killed): nothing was written
            log.info("the JVM writes its class archive %s as it exits (once per machine; later Spark "
                     "starts are faster)", self.path)
            with contextlib.suppress(Exception):
                session.stop()
            process.stdin.close()  # the gateway JVM exits when its stdin closes, writing the archive
            # the JVM is in a session of its own (spark_session._launch_jvm_apart): it outlives this
            # process, and a detached waiter puts the archive in place, so no command waits for it
            waiter = ("import sys; from pipeline.extract.class_archive import settle; "
                      "settle(int(sys.argv[1]), *sys.argv[2:])")
            subprocess.Popen(
                [sys.executable, "-c", waiter, str(process.pid), str(self.partial), str(self.path)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True)
        except Exception as exc:  # noqa: BLE001  an optimisation: a failed recording costs the next start only
            log.info("no JVM class archive written (%s)", exc)
        finally:
            self.lock.release()


def settle(pid: int, partial: str | Path, path: str | Path, timeout: float = RECORD_SECONDS) -> bool:
    """Wait (up to ``timeout``) for the JVM ``pid`` to exit, then put its archive in place if its
    log says it was written whole: a truncated archive would crash every later start (see
    :meth:`ArchiveUse.discard`, the net under this). Returns whether it did."""
    partial, path = Path(partial), Path(path)
    journal = journal_of(partial)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        whole = not _alive(pid) and partial.exists() and WRITTEN in journal.read_text(errors="replace")
        if whole:
            os.replace(partial, path)
        return whole
    except OSError:
        return False
    finally:
        partial.unlink(missing_ok=True)
        journal.unlink(missing_ok=True)


def journal_of(partial: Path) -> Path:
    """Where the JVM writing ``partial`` logs its class-sharing lines (the recorder's options say it)."""
    return partial.with_suffix(".log")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # exited but not yet reaped by whoever adopted it
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    return True


@dataclass(frozen=True)
class ArchiveUse:
    """What a driver JVM does with the archive: the options that say it, the archive it maps (if
    any), the recording this process finishes at exit (if it records)."""

    options: str = ""
    mapped: Path | None = None
    recording: Recording | None = None

    def discard(self) -> None:
        """The JVM did not start while mapping :attr:`mapped`, and did without it: a damaged
        archive crashes it at every start (seen: SIGBUS on a truncated file), so it goes, to be
        recorded again."""
        if self.mapped is not None:
            log.warning("Spark's JVM did not start with the class archive %s, twice, but did without it: "
                        "the archive was removed (a later run records it again)", self.mapped)
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
    _remove_cut_recordings(path)
    # a name of its own: a detached waiter may still be settling an earlier recording
    partial = path.with_suffix(f".{secrets.token_hex(4)}.partial")
    recording = Recording(path, partial, lock)
    return ArchiveUse(f"-XX:ArchiveClassesAtExit={partial} {QUIET} "
                      f"-Xlog:cds+dynamic=info:file={recording.journal}", recording=recording)


def _remove_cut_recordings(path: Path) -> None:
    """Partial archives (and their logs) older than a recording can take were cut short."""
    for stale in [*path.parent.glob(f"{path.stem}.*.partial"), *path.parent.glob(f"{path.stem}.*.log")]:
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > 2 * RECORD_SECONDS:
                stale.unlink()


def _mapping(path: Path) -> ArchiveUse:
    return ArchiveUse(f"-XX:SharedArchiveFile={path} {QUIET} {MAP}", mapped=path)


def _digest(java: str) -> str:
    real = Path(java).resolve()
    stat = real.stat()
    material = f"{real}|{stat.st_size}|{stat.st_mtime_ns}"
    return hashlib.sha256(material.encode()).hexdigest()[:16]
