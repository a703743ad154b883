"""Which JVM options a local Spark driver gets for its class archive, and who records it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from pipeline.extract.class_archive import RECORD_SECONDS, WRITTEN, ArchiveUse, driver_options, settle
from tests.conftest import ROOT

JAVA = sys.executable  # any existing binary: the archive is keyed by the java file's identity


def _in_another_process(folder) -> str:
    """What another process gets (the recorder's lock is per process)."""
    code = ("from pathlib import Path; from pipeline.extract.class_archive import driver_options; "
            f"print(driver_options(Path({str(folder)!r}), {JAVA!r}, '4.0', may_record=True))")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_off_or_no_java_means_no_archive(tmp_path):
    assert driver_options(None, JAVA, "4.0", may_record=True) == ArchiveUse()
    assert driver_options(tmp_path, None, "4.0", may_record=True) == ArchiveUse()


def test_one_process_records_the_others_start_without_until_it_is_written(tmp_path):
    use = driver_options(tmp_path, JAVA, "4.0", may_record=True)
    recording = use.recording
    assert recording is not None and use.options.startswith(f"-XX:ArchiveClassesAtExit={recording.partial} ")
    assert "-Xlog:cds*=off" in use.options  # the JVM's class-sharing warnings would go to stdout
    assert f"-Xlog:cds+dynamic=info:file={recording.journal}" in use.options  # says when it is whole
    assert _in_another_process(tmp_path) == "ArchiveUse(options='', mapped=None, recording=None)"  # locked
    recording.partial.write_bytes(b"archive")
    recording.partial.replace(recording.path)  # what the recorder's exit does once its JVM wrote it
    recording.lock.release()
    again = driver_options(tmp_path, JAVA, "4.0", may_record=True)
    assert again == ArchiveUse(f"-XX:SharedArchiveFile={recording.path} -Xlog:cds*=off "
                               "-XX:+SuppressFatalErrorMessage", mapped=recording.path)
    # another Spark version is another class path: its own archive
    assert driver_options(tmp_path, JAVA, "4.1", may_record=False) == ArchiveUse()
    again.discard()  # the JVM did not start with it: gone, and recorded again by the next run
    assert not recording.path.exists() and driver_options(tmp_path, JAVA, "4.0", may_record=True).recording


def test_a_long_lived_process_never_records_and_a_cut_recording_is_removed(tmp_path):
    assert driver_options(tmp_path, JAVA, "4.0", may_record=False) == ArchiveUse()
    recording = driver_options(tmp_path, JAVA, "4.0", may_record=True).recording
    recording.partial.write_bytes(b"half")  # its JVM was killed while it wrote
    recording.journal.write_text("[cds,dynamic] Archiving hidden ...")
    recording.lock.release()
    young = driver_options(tmp_path, JAVA, "4.0", may_record=True).recording
    assert young.partial != recording.partial and recording.partial.exists()  # may still be writing
    young.lock.release()
    old = time.time() - 3 * RECORD_SECONDS
    for cut in (recording.partial, recording.journal):
        os.utime(cut, (old, old))
    later = driver_options(tmp_path, JAVA, "4.0", may_record=True).recording
    assert not recording.partial.exists() and not recording.journal.exists()
    later.lock.release()


def test_an_archive_is_put_in_place_only_once_its_jvm_exited_and_logged_it_whole(tmp_path):
    path = tmp_path / "spark-4.0-java-x.jsa"
    partial, journal = path.with_suffix(".ab.partial"), path.with_suffix(".ab.log")
    jvm = subprocess.Popen(["sleep", "1"])  # stands for the exiting JVM
    partial.write_bytes(b"archive")
    journal.write_text(f"[info][cds,dynamic] {WRITTEN} 0x0 - 0x1 [984 bytes header, 7 bytes total]\n")
    started = time.monotonic()
    assert settle(jvm.pid, partial, path, timeout=30)
    assert time.monotonic() - started >= 0.9 and path.read_bytes() == b"archive"  # waited for it
    assert not partial.exists() and not journal.exists()

    # killed while writing: the log never says "written", so no truncated archive is used
    path.unlink()
    cut = subprocess.Popen(["sleep", "30"])
    partial.write_bytes(b"arch")
    journal.write_text("[info][cds,dynamic] Archiving hidden java.lang.invoke.Lambda\n")
    cut.kill()
    assert not settle(cut.pid, partial, path, timeout=30)
    assert not path.exists() and not partial.exists() and not journal.exists()

    # a JVM still running after the timeout: nothing is put in place
    slow = subprocess.Popen(["sleep", "30"])
    partial.write_bytes(b"archive")
    journal.write_text(f"{WRITTEN}\n")
    assert not settle(slow.pid, partial, path, timeout=0.5) and not path.exists()
    slow.kill()
