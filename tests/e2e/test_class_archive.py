"""The local driver's JVM class archive (pipeline/extract/class_archive.py): recorded by the first
one-shot Spark run, mapped by the next, and never in a run's output."""

from __future__ import annotations

import json

from tests.conftest import run_cli
from tests.helpers import add_events, assert_lake_equals_source


def test_the_first_spark_run_records_the_class_archive_and_the_next_maps_it(settings, lake_env, tmp_path):
    folder = tmp_path / "jvm"
    env = {**lake_env, "SPARK_CLASS_ARCHIVE": str(folder)}
    add_events(settings, 500, seed=71)
    first = run_cli("events_pipeline.py", "--run", "--json", env=env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["rows_inserted"] == 500  # stdout is the one JSON document
    assert "writing the JVM class archive" in first.stderr
    [archive] = folder.glob("*.jsa")
    assert archive.stat().st_size > 10_000_000 and list(folder.glob("*.partial")) == []
    recorded = archive.stat().st_mtime_ns

    add_events(settings, 200, seed=72)
    # -Xshare:on: a JVM that cannot map its archive refuses to start, so this run passing proves
    # the archive is used, not only written
    second = run_cli("events_pipeline.py", "--run", "--json", env={**env, "JAVA_TOOL_OPTIONS": "-Xshare:on"})
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["rows_inserted"] == 200
    assert "writing the JVM class archive" not in second.stderr and archive.stat().st_mtime_ns == recorded
    assert_lake_equals_source(settings, expected_rows=700)
