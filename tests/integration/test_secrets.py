"""The source password reaches the arrow reader's Spark tasks inside the pickled task only: not in
a plan, a Spark property, a command line or a worker's environment (a password-checking server;
the output of real processes is checked in tests/e2e/test_secrets_in_output.py)."""

from __future__ import annotations

import contextlib
from urllib.parse import quote

from pipeline.settings import load_settings
from tests.conftest import PASSWORD
from tests.helpers import add_events, only_table, source_table, wait_for_slow_reads


def test_the_arrow_readers_tasks_get_the_password_outside_plans_properties_and_command_lines(
        guarded_pg, tmp_path, spark, monkeypatch):
    """The source password travels inside the pickled task only: not in the query plan Spark
    shows (UI, logs), not in a Spark property, not on any process's command line or in the
    environment of the Python workers; the tasks still read through the password-checking server."""
    import threading
    from datetime import UTC, datetime

    import psutil

    from pipeline.extract import spark_arrow
    from pipeline.extract.batch import ExtractRequest
    from pipeline.extract.slice_task import RESULT_SCHEMA
    from pipeline.settings.resolve import resolve
    from pipeline.source.plan import BatchPlan
    from pipeline.source.shape import SourceRelation
    from pipeline.source.stats import WindowStats
    from pipeline.source.window import Window

    env = {"SOURCE_PG_DSN": guarded_pg.url("src"), "DUCKLAKE_CATALOG": guarded_pg.url("cat"),
           "DUCKLAKE_DATA_PATH": str(tmp_path / "data") + "/", "STAGING_PATH": str(tmp_path / "staging"),
           "EVENT_LAKE_HOME": str(tmp_path / "home")}
    settings = resolve(load_settings(env))
    add_events(settings, 300, seed=73)
    from pipeline.source.connect import connect

    with connect(settings.source_dsn) as conn:  # the earlier test's rows are there too
        rows = conn.execute(f"SELECT count(*) FROM {source_table(settings)}").fetchone()[0]
    window = Window(None, datetime.now(UTC))
    source = SourceRelation(source_table(settings))  # the events shape: read as it is
    request = ExtractRequest(settings, only_table(settings), BatchPlan(source, window, WindowStats(rows, None, None), None),
                             "secret-test")
    folder = tmp_path / "staging" / "out"
    folder.mkdir(parents=True)
    from pipeline.storage.folder import folder_of

    # the job's queries are built here: 2 s in Postgres, while the watcher looks (it finds them in ~0.3 s)
    from tests import faults

    monkeypatch.setattr(faults, "SLOW_READ_SECONDS", 2)
    faults.install("slow-read", monkeypatch.setattr)
    frame = spark.range(0, 1, 1, 1).mapInArrow(
        spark_arrow.job(request, [(window, None)], folder_of(str(folder), settings.storage)), RESULT_SCHEMA)
    plan = frame._jdf.queryExecution().toString()
    conf = str(spark.sparkContext.getConf().getAll()) + str(spark.conf.getAll)
    seen: list[str] = []
    failed: list[BaseException] = []

    def watch() -> None:  # look at every process while the task sleeps in Postgres (slow-read)
        try:
            wait_for_slow_reads(env["SOURCE_PG_DSN"], timeout=60)
            for proc in psutil.process_iter(["cmdline", "environ"]):
                with contextlib.suppress(psutil.Error):
                    seen.append(" ".join(proc.info["cmdline"] or []) + str(proc.info["environ"] or {}))
        except BaseException as exc:  # noqa: BLE001  surfaced below
            failed.append(exc)

    watcher = threading.Thread(target=watch)
    watcher.start()
    [result] = frame.collect()
    watcher.join()
    assert not failed and seen, failed  # the processes were seen while the task ran
    assert result["rows"] == rows  # read through the server that checks the password
    for form in (PASSWORD, quote(PASSWORD, safe="")):
        assert form not in plan and form not in conf
        assert not any(form in text for text in seen), "the password is on a command line or in an environment"
