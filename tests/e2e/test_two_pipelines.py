"""Two pipelines in one process never touch each other's resources: each has a Spark session of
its own and its own lake attaches; closing one leaves the other loading; the process's Spark
stops with the last pipeline that started it, and never when someone else started it.

Measured before: two long-lived pipelines got the same Spark session; after ``a.close()``,
``b.load()`` failed with ``'NoneType' object has no attribute 'sc'``, and ``close()`` dropped every
pipeline's lake attaches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT
from tests.helpers import add_events, assert_lake_equals_source

SCRIPT = textwrap.dedent("""
    import json, sys
    from pyspark import SparkContext
    from pipeline import Pipeline, Settings
    from pipeline.settings import load_settings
    from tests.helpers import add_events

    env_a, env_b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    facts = {}
    a = Pipeline(Settings(**{k.lower(): v for k, v in env_a.items()}), long_lived=True)
    b = Pipeline(Settings(**{k.lower(): v for k, v in env_b.items()}), long_lived=True)
    facts["a_first"] = a.load().rows_inserted
    facts["b_first"] = b.load().rows_inserted
    facts["own_sessions"] = a.spark_session() is not b.spark_session()
    a.close()
    facts["running_after_a"] = SparkContext._active_spark_context is not None
    add_events(load_settings(env_b), 100, seed=503)
    facts["b_after_a_closed"] = b.load().rows_inserted
    b.close()
    facts["running_after_b"] = SparkContext._active_spark_context is not None
    print(json.dumps(facts))
""")


def test_two_pipelines_in_one_process_close_only_what_they_opened(new_lake_env):
    from pipeline.settings import load_settings

    env_a, env_b = new_lake_env("a"), new_lake_env("b")
    settings_a, settings_b = load_settings(env_a), load_settings(env_b)
    add_events(settings_a, 300, seed=501)
    add_events(settings_b, 200, seed=502)
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(env_a), json.dumps(env_b)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts == {"a_first": 300, "b_first": 200, "own_sessions": True, "running_after_a": True,
                     "b_after_a_closed": 100, "running_after_b": False}, facts
    assert_lake_equals_source(settings_a, expected_rows=300)
    assert_lake_equals_source(settings_b, expected_rows=300)


def test_a_pipeline_never_stops_the_spark_session_it_was_given_nor_one_started_before_it(settings, spark):
    """A notebook's own SparkSession (here the test worker's): a pipeline given it extracts with it,
    and one taking a session of its own gets one on the running context; closing either leaves the
    notebook's session working."""
    from pipeline import Pipeline

    add_events(settings, 150, seed=504)
    with Pipeline(settings, spark=spark) as given:
        assert given.run().rows_inserted == 150
    with Pipeline(settings, long_lived=True) as own:
        assert own.spark_session() is not spark
        add_events(settings, 50, seed=505)
        assert own.load().rows_inserted == 50
        # a wrong version is a ConfigError with a hint, as on the command line (was raw DuckDB)
        from pipeline import ConfigError

        with pytest.raises(ConfigError, match="No snapshot found"):
            own.changes(1, 99_999)
        with pytest.raises(ConfigError, match="read-only"):
            own.sql("DELETE FROM events")
    assert spark.range(3).count() == 3  # still running
    assert_lake_equals_source(settings, expected_rows=200)


def test_the_python_page_runs_as_written(settings, lake_env, tmp_path):
    """docs/python.md's examples, with this test's lake in place of the page's addresses: five
    lines from import to a typed report, then SQL, snapshots, time travel and the change feed."""
    import re

    page = (ROOT / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 2 and len([line for line in blocks[0].splitlines() if line.strip()]) <= 6
    code = "\n".join(blocks)
    for name, value in {"source_pg_dsn": lake_env["SOURCE_PG_DSN"], "ducklake_catalog": lake_env["DUCKLAKE_CATALOG"],
                        "ducklake_data_path": lake_env["DUCKLAKE_DATA_PATH"],
                        "staging_path": lake_env["STAGING_PATH"]}.items():
        code, replaced = re.subn(rf'{name}="[^"]*"', f"{name}={value!r}", code)
        assert replaced == 1, name
    add_events(settings, 250, seed=506)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOURCE_", "DUCKLAKE_"))}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    summary, sql_line = done.stdout.strip().splitlines()[-2:]
    assert summary.startswith("events: staged 250 rows") and "250 new rows" in summary, done.stdout
    assert "'n': 250" in sql_line and sql_line.endswith(" 250"), sql_line
    assert_lake_equals_source(settings, expected_rows=250)
