"""Passwords with every special character work end to end against a server that checks them,
and appear nowhere: not in any output stream, log file, staging manifest, commit message or
ops table. Identifiers from configuration are validated before they reach SQL."""

from __future__ import annotations

import contextlib
import json
import time
from urllib.parse import quote

import pytest

from pipeline.errors import ConfigError
from pipeline.settings import load_settings
from pipeline.settings.pgdsn import PgDsn
from tests.conftest import run_cli
from tests.helpers import add_events, assert_lake_equals_source, jobs_table, lake_query
from tests.private_pg import PrivatePostgres

PASSWORD = "p@ss:w/rd%'\" x;"


@pytest.fixture(scope="module")
def guarded_pg():
    server = PrivatePostgres(PASSWORD).init()
    for name in ("src", "cat"):
        server.create_db(name)
    yield server
    server.destroy()


def test_special_character_passwords_work_and_never_leak(guarded_pg, tmp_path):
    home = tmp_path / "home"
    env = {"SOURCE_PG_DSN": guarded_pg.url("src"), "DUCKLAKE_CATALOG": guarded_pg.url("cat"),
           "DUCKLAKE_DATA_PATH": str(tmp_path / "data") + "/", "STAGING_PATH": str(tmp_path / "staging"),
           "EVENT_LAKE_HOME": str(home), "LOOKBACK": "15m"}
    settings = load_settings(env)
    add_events(settings, 500, seed=71)
    outputs = [run_cli("events_pipeline.py", "--extract-only", env=env)]  # Spark JDBC, staged only
    manifests = list((tmp_path / "staging").rglob("_manifest.json"))
    assert len(manifests) == 1, outputs[0].stdout + outputs[0].stderr
    staged_manifest = manifests[0].read_text()
    add_events(settings, 100, seed=72)
    outputs += [run_cli("events_pipeline.py", "--run", "--engine", "dlt", env=env),  # SQLAlchemy
                run_cli("events_pipeline.py", "--verify", env=env),
                run_cli("events_pipeline.py", "--status", "--json", env=env),
                run_cli("events_pipeline.py", "--print-attach", env=env)]
    for result in outputs:
        assert result.returncode == 0, result.args[2:] + [result.stdout, result.stderr]
    assert_lake_equals_source(settings, expected_rows=600)

    wrong = run_cli("events_pipeline.py", "--run", env={**env, "SOURCE_PG_DSN": guarded_pg.url("src").replace(
        quote(PASSWORD, safe=""), quote(PASSWORD + "-wrong", safe=""))})
    assert wrong.returncode != 0
    assert "password authentication failed" in wrong.stdout + wrong.stderr, wrong.stdout + wrong.stderr
    assert "Traceback" not in wrong.stdout + wrong.stderr
    outputs.append(wrong)

    recorded = lake_query(settings, "SELECT string_agg(commit_message || coalesce(commit_extra_info, ''), ' ') "
                                    "FROM lake.snapshots()")[0][0]
    recorded += json.dumps(lake_query(settings, "SELECT * FROM lake.ops.batches"), default=str)
    recorded += json.dumps(lake_query(settings, f"SELECT * FROM {jobs_table(settings)}"), default=str)
    logs = "".join(p.read_text(errors="replace") for p in home.rglob("*") if p.is_file() and p.suffix in
                   (".log", ".json", ".txt", ""))
    haystacks = {"output": "".join(r.stdout + r.stderr for r in outputs), "manifest": staged_manifest,
                 "lake": recorded, "logs": logs}
    for form in (PASSWORD, quote(PASSWORD, safe=""), PASSWORD.replace("'", "''")):
        for where, text in haystacks.items():
            assert form not in text, f"the password appears in the {where}"


def test_malformed_dsns_name_the_problem_without_the_password():
    for dsn in ("postgresql://u:pa%zzsecret@h:5432/db", "postgresql://u:pa secret@h:port/db"):
        with pytest.raises(ConfigError) as err:
            PgDsn.parse(dsn, "SOURCE_PG_DSN")
        assert "secret" not in str(err.value) and "SOURCE_PG_DSN" in str(err.value)
        assert "Percent-encode" in err.value.hint or "digits" in err.value.hint
    # unencoded characters in the password itself are read as the user meant them, never shown
    lenient = PgDsn.parse("postgresql://u:pa secret/x@y@h/db", "SOURCE_PG_DSN")
    assert lenient.password.reveal() == "pa secret/x@y" and "secret" not in lenient.masked()


@pytest.mark.parametrize(("key", "value"), [("SOURCE_TABLE", "events; DROP TABLE x"),
                                            ("SOURCE_TABLE", 'public."events"'),
                                            ("DUCKLAKE_NAME", "lake; DETACH lake")])
def test_injection_through_identifiers_is_refused(key, value):
    with pytest.raises(ConfigError) as err:
        load_settings({key: value})
    assert key in str(err.value) and value in str(err.value)



def test_the_arrow_readers_tasks_get_the_password_outside_plans_properties_and_command_lines(
        guarded_pg, tmp_path, spark):
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
    from pipeline.source.stats import WindowStats
    from pipeline.source.window import Window

    env = {"SOURCE_PG_DSN": guarded_pg.url("src"), "DUCKLAKE_CATALOG": guarded_pg.url("cat"),
           "DUCKLAKE_DATA_PATH": str(tmp_path / "data") + "/", "STAGING_PATH": str(tmp_path / "staging"),
           "EVENT_LAKE_HOME": str(tmp_path / "home"), "EVENT_LAKE_FAULT": "slow-read"}
    settings = resolve(load_settings(env))
    add_events(settings, 300, seed=73)
    from pipeline.source.connect import connect

    with connect(settings.source_dsn) as conn:  # the earlier test's rows are there too
        rows = conn.execute(f"SELECT count(*) FROM {settings.source_table}").fetchone()[0]
    window = Window(None, datetime.now(UTC))
    request = ExtractRequest(settings, window, WindowStats(rows, None, None), "secret-test")
    folder = tmp_path / "staging" / "out"
    folder.mkdir(parents=True)
    from pipeline.staging.location import folder_of

    frame = spark.range(0, 1, 1, 1).mapInArrow(
        spark_arrow.job(request, [(window, None)], folder_of(str(folder), settings.storage)), RESULT_SCHEMA)
    plan = frame._jdf.queryExecution().toString()
    conf = str(spark.sparkContext.getConf().getAll()) + str(spark.conf.getAll)
    seen: list[str] = []

    def watch() -> None:  # the tasks sleep 30 s in Postgres (slow-read): look while they run
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            for proc in psutil.process_iter(["cmdline", "environ"]):
                with contextlib.suppress(psutil.Error):
                    seen.append(" ".join(proc.info["cmdline"] or []) + str(proc.info["environ"] or {}))
            time.sleep(2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    [result] = frame.collect()
    watcher.join()
    assert result["rows"] == rows  # read through the server that checks the password
    for form in (PASSWORD, quote(PASSWORD, safe="")):
        assert form not in plan and form not in conf
        assert not any(form in text for text in seen), "the password is on a command line or in an environment"
