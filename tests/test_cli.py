"""The pipeline CLI as users meet it: exit codes, plain last lines, no leaked secrets."""

from __future__ import annotations

from tests.conftest import run_cli


def test_help_lists_the_contract_flags():
    result = run_cli("events_pipeline.py", "--help")
    assert result.returncode == 0
    for flag in ("--run", "--extract-only", "--promote-only", "--demo", "--status", "--engine",
                 "--print-attach", "--show-secrets", "--json"):
        assert flag in result.stdout


def test_unreachable_source_fails_clearly_without_the_password(lake_env):
    env = {**lake_env, "SOURCE_PG_DSN": "postgresql://bob:hunter2@127.0.0.1:1/nowhere"}
    result = run_cli("events_pipeline.py", "--run", env=env)
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert "hunter2" not in output
    assert "Cannot connect to the source Postgres at postgresql://bob:***@127.0.0.1:1/nowhere" in output
    assert result.stdout.strip().splitlines()[-1].startswith("Failed (temporary")


def test_malformed_catalog_names_accepted_forms(lake_env):
    result = run_cli("events_pipeline.py", "--status", env={**lake_env, "DUCKLAKE_CATALOG": "mysql://x"})
    assert result.returncode == 1
    assert "sqlite:path" in result.stderr


def test_bad_lookback_is_a_config_error(lake_env):
    result = run_cli("events_pipeline.py", "--run", "--lookback", "soon", env=lake_env)
    assert result.returncode == 1 and "is not a duration" in result.stderr


def test_missing_source_table_says_how_to_create_it(lake_env):
    result = run_cli("events_pipeline.py", "--run", "--engine", "dlt", env=lake_env)
    assert result.returncode == 1
    assert "insert_event_data_loop.py" in result.stderr


def test_print_attach_masks_secrets_unless_asked(lake_env):
    env = {**lake_env, "DUCKLAKE_CATALOG": lake_env["DUCKLAKE_CATALOG"] + " password=pw_7781"}
    masked = run_cli("events_pipeline.py", "--print-attach", env=env)
    assert masked.returncode == 0 and "pw_7781" not in masked.stdout and "'***'" in masked.stdout
    shown = run_cli("events_pipeline.py", "--print-attach", "--show-secrets", env=env)
    assert "pw_7781" in shown.stdout


def test_print_attach_output_opens_the_lake_in_a_fresh_duckdb(lake_env):
    import duckdb

    run_cli("insert_event_data_loop.py", "--rows", "100", env=lake_env)
    assert run_cli("events_pipeline.py", "--run", "--engine", "dlt", env=lake_env).returncode == 0
    script = run_cli("events_pipeline.py", "--print-attach", "--show-secrets", env=lake_env).stdout
    con = duckdb.connect()
    for statement in script.split(";\n"):
        if statement.strip() and not statement.lstrip().startswith("--"):
            con.execute(statement)
    assert con.execute("SELECT count(*) FROM lake.main.events").fetchone()[0] == 100


def test_status_json_reports_watermark_and_rows(lake_env):
    import json

    run_cli("insert_event_data_loop.py", "--rows", "50", env=lake_env)
    run_cli("events_pipeline.py", "--run", "--engine", "dlt", env=lake_env)
    result = run_cli("events_pipeline.py", "--status", "--json", env=lake_env)
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["lake_rows"] == 50 and status["watermark"] and status["source_rows_after_watermark"] == 0


def test_version_matches_the_package_and_log_lines_carry_utc_time_and_level(settings, lake_env):
    import re
    import tomllib

    from tests.conftest import ROOT
    from tests.helpers import add_events

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    result = run_cli("events_pipeline.py", "--version")
    assert result.returncode == 0 and result.stdout.strip() == f"event-lake {version}"
    add_events(settings, 10, seed=95)
    loaded = run_cli("events_pipeline.py", "--run", "--engine", "dlt", env=lake_env)
    log_line = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ INFO \[run [0-9a-f]{6}\] extracting 10 rows"
    assert re.search(log_line, loaded.stderr, flags=re.M), loaded.stderr


def test_a_reader_that_closes_the_pipe_gets_no_traceback(lake_env):
    """``… | head -1``: the pipeline exits quietly (141, as SIGPIPE would) without a traceback."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {**__import__("os").environ, **lake_env}
    writer = subprocess.Popen([sys.executable, str(ROOT / "events_pipeline.py"), "--write", "--sql",
                               "SELECT * FROM range(200000)", "--limit", "200000"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    writer.stdout.readline()
    writer.stdout.close()  # the reader goes away after one line
    stderr = writer.stderr.read().decode()
    assert writer.wait(120) == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


def test_status_before_the_first_run_says_the_lake_is_not_created_yet(settings, lake_env):
    import json

    from tests.helpers import add_events

    add_events(settings, 25, seed=96)
    result = run_cli("events_pipeline.py", "--status", "--json", env=lake_env)
    assert result.returncode == 1, result.stdout + result.stderr  # stale: rows waiting, nothing loaded
    status = json.loads(result.stdout)
    assert status["lake_exists"] is False and status["source_rows_after_watermark"] == 25
    assert status["health"]["state"] == "stale" and "nothing loaded yet" in status["health"]["reasons"][0]
    text = run_cli("events_pipeline.py", "--status", env=lake_env)
    assert "not created yet (the first --run creates it)" in text.stdout, text.stdout + text.stderr


def test_no_java_is_a_fix_and_an_unreachable_connect_server_is_temporary(lake_env):
    assert run_cli("insert_event_data_loop.py", "--rows", "50", env=lake_env).returncode == 0
    no_java = run_cli("events_pipeline.py", "--run", env={**lake_env, "JAVA_HOME": "/nonexistent-jdk"})
    assert no_java.returncode == 1
    assert "no java was found (JAVA_HOME=/nonexistent-jdk)" in no_java.stderr and "--engine dlt" in no_java.stderr
    assert no_java.stdout.strip().splitlines()[-1].startswith("Failed: Spark needs Java")  # not temporary
    # refused at once (the Connect client alone would retry for many minutes), and worth retrying
    down = run_cli("events_pipeline.py", "--run", env={**lake_env, "SPARK_REMOTE": "sc://127.0.0.1:1"},
                   timeout=60)
    assert down.returncode == 1
    assert down.stdout.strip().splitlines()[-1].startswith("Failed (temporary"), down.stdout + down.stderr
