"""Secrets in what a user sees: passwords with every special character work, and never appear in
the output of a real process (the JVM's own stderr included)."""

from __future__ import annotations

import json
from urllib.parse import quote

from pipeline.settings import load_settings
from tests.conftest import PASSWORD, run_cli
from tests.helpers import add_events, assert_lake_equals_source, jobs_table, lake_query


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


def test_a_spark_connect_token_never_shows_in_doctor(lake_env, tmp_path):
    """SPARK_REMOTE=sc://host:port/;token=… carries a bearer token: --doctor printed it whole when
    Java was absent (the pipeline image's case: Spark runs on the Connect server) and in the JDBC
    driver's line (found by the adversary)."""
    secret = "S3cr3tT0k3n"
    remote = f"sc://127.0.0.1:1/;token={secret}"
    for extra in ({"JAVA_HOME": str(tmp_path / "no-java")}, {"SPARK_READER": "jdbc"}):
        for args in (("--doctor",), ("--doctor", "--json")):
            out = run_cli("events_pipeline.py", *args, env={**lake_env, "SPARK_REMOTE": remote, **extra})
            assert secret not in out.stdout + out.stderr, out.stdout + out.stderr
            assert "token=***" in out.stdout + out.stderr, out.stdout + out.stderr
