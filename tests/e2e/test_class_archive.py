"""The local driver's JVM class archive (pipeline/extract/class_archive.py): recorded by the first
one-shot Spark run, mapped by the next, never in a run's output, and never fatal when damaged."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.conftest import ROOT, run_cli
from tests.helpers import add_events, assert_lake_equals_source


def test_the_first_spark_run_records_the_class_archive_and_the_next_maps_it(settings, lake_env, tmp_path):
    folder = tmp_path / "jvm"
    env = {**lake_env, "SPARK_CLASS_ARCHIVE": str(folder)}
    add_events(settings, 500, seed=71)
    first = run_cli("events_pipeline.py", "--run", "--json", env=env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["rows_inserted"] == 500  # stdout is the one JSON document
    assert "writes its class archive" in first.stderr
    # the command did not wait for the archive: its JVM writes it after, and a detached waiter
    # puts it in place once the JVM's log says it is whole
    assert list(folder.glob("*.jsa")) == []
    archive = _settled(folder)
    assert archive.stat().st_size > 10_000_000
    assert list(folder.glob("*.partial")) == [] and list(folder.glob("*.log")) == []
    recorded = archive.stat().st_mtime_ns

    add_events(settings, 200, seed=72)
    # -Xshare:on: a JVM that cannot map its archive refuses to start, so this run passing proves
    # the archive is used, not only written
    second = run_cli("events_pipeline.py", "--run", "--json", env={**env, "JAVA_TOOL_OPTIONS": "-Xshare:on"})
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["rows_inserted"] == 200
    assert "class archive" not in second.stderr and archive.stat().st_mtime_ns == recorded

    # a start that fails for another reason (here an option the JVM refuses) is not the
    # archive's fault: it stays (a failed JDBC leg of a benchmark removed it)
    add_events(settings, 10, seed=74)  # something to extract, so Spark starts
    bad = run_cli("events_pipeline.py", "--run", "--spark-conf", "spark.driver.memory=12q", env=env)
    assert bad.returncode != 0 and "did not start with the class archive" not in bad.stderr, bad.stderr
    assert archive.exists() and archive.stat().st_mtime_ns == recorded

    # a JVM killed as it starts (by an operator, the OOM killer) is not the archive's fault either:
    # the start is tried again with it, and the archive stays (it was deleted, and every later
    # start paid for recording it again)
    add_events(settings, 20, seed=75)
    killed_run = _run_killing_the_first_jvm(env)
    assert killed_run.returncode == 0, killed_run.stderr
    assert json.loads(killed_run.stdout)["rows_inserted"] == 30  # with the 10 the failed start left
    assert "did not start with the class archive" not in killed_run.stderr
    assert archive.exists() and archive.stat().st_mtime_ns == recorded

    # a damaged archive crashes the JVM at start (SIGBUS on a truncated file): removed, and the
    # run starts Spark again without it; stdout holds the JSON only, no crash report anywhere
    with archive.open("r+b") as damaged:
        damaged.truncate(1_000_000)
    add_events(settings, 100, seed=73)
    third = run_cli("events_pipeline.py", "--run", "--json", env=env)
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["rows_inserted"] == 100
    assert "did not start with the class archive" in third.stderr and not archive.exists()
    assert not list(ROOT.glob("hs_err_pid*.log"))
    assert not list((Path(lake_env["EVENT_LAKE_HOME"]) / "logs").glob("hs_err_pid*.log"))
    assert_lake_equals_source(settings, expected_rows=830)


def _run_killing_the_first_jvm(env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``--run --json`` whose first driver JVM is SIGKILLed as soon as it exists (long before it
    has started Spark: that takes seconds)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SOURCE_", "DUCKLAKE_"))}
    proc = subprocess.Popen([sys.executable, str(ROOT / "events_pipeline.py"), "--run", "--json"],
                            env={**full_env, **env}, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + timeout
        killed = False
        while not killed and proc.poll() is None and time.monotonic() < deadline:
            for child in psutil.Process(proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if child.name() == "java":
                        child.kill()
                        killed = True
                        break
            time.sleep(0.02)
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert killed, "no driver JVM appeared"
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _settled(folder: Path, timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := list(folder.glob("*.jsa")):
            return found[0]
        time.sleep(0.5)
    raise AssertionError(f"no class archive in {folder} after {timeout}s: {sorted(folder.iterdir())}")
