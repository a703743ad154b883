"""Which JVM options a local Spark driver gets for its class archive, and who records it."""

from __future__ import annotations

import subprocess
import sys

from pipeline.extract.class_archive import ArchiveUse, driver_options
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


def test_a_long_lived_process_never_records_and_a_cut_recording_is_replaced(tmp_path):
    assert driver_options(tmp_path, JAVA, "4.0", may_record=False) == ArchiveUse()
    recording = driver_options(tmp_path, JAVA, "4.0", may_record=True).recording
    recording.partial.write_bytes(b"half")  # its process was killed while the JVM wrote
    recording.lock.release()
    next_recording = driver_options(tmp_path, JAVA, "4.0", may_record=True).recording
    assert next_recording is not None and not next_recording.partial.exists()
    next_recording.lock.release()
