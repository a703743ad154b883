"""The local driver's JVM class archive (pipeline/extract/class_archive.py): recorded by the first
one-shot Spark run, mapped by the next, never in a run's output, and never fatal when damaged."""

from __future__ import annotations

import json
import time
from pathlib import Path

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

    # a damaged archive crashes the JVM at start (SIGBUS on a truncated file): removed, and the
    # run starts Spark again without it; stdout holds the JSON only, no crash report anywhere
    with archive.open("r+b") as damaged:
        damaged.truncate(1_000_000)
    add_events(settings, 100, seed=73)
    third = run_cli("events_pipeline.py", "--run", "--json", env=env)
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["rows_inserted"] == 110  # with the 10 the failed start left
    assert "did not start with the class archive" in third.stderr and not archive.exists()
    assert not list(ROOT.glob("hs_err_pid*.log"))
    assert not list((Path(lake_env["EVENT_LAKE_HOME"]) / "logs").glob("hs_err_pid*.log"))
    assert_lake_equals_source(settings, expected_rows=810)


def _settled(folder: Path, timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := list(folder.glob("*.jsa")):
            return found[0]
        time.sleep(0.5)
    raise AssertionError(f"no class archive in {folder} after {timeout}s: {sorted(folder.iterdir())}")
