"""CLI commands a user runs, in-process through main(argv): clear errors without passwords,
--print-attach, --status before and after the first run."""

from __future__ import annotations

from tests.conftest import run_cli


def test_unreachable_source_fails_clearly_without_the_password(lake_env, cli):
    env = {**lake_env, "SOURCE_PG_DSN": "postgresql://bob:hunter2@127.0.0.1:1/nowhere"}
    result = cli("--run", env=env)
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert "hunter2" not in output
    assert "Cannot connect to the source Postgres at postgresql://bob:***@127.0.0.1:1/nowhere" in output
    assert result.stdout.strip().splitlines()[-1].startswith("Failed (temporary")


def test_malformed_catalog_names_accepted_forms(lake_env, cli):
    result = cli("--status", env={**lake_env, "DUCKLAKE_CATALOG": "mysql://x"})
    assert result.returncode == 1
    assert "sqlite:path" in result.stderr


def test_bad_lookback_is_a_config_error(lake_env, cli):
    result = cli("--run", "--lookback", "soon", env=lake_env)
    assert result.returncode == 1 and "is not a duration" in result.stderr


def test_missing_source_table_says_how_to_create_it(lake_env, cli):
    result = cli("--run", "--engine", "dlt", env=lake_env)
    assert result.returncode == 1
    assert "insert_event_data_loop.py" in result.stderr


def test_print_attach_masks_secrets_unless_asked(lake_env, cli):
    env = {**lake_env, "DUCKLAKE_CATALOG": lake_env["DUCKLAKE_CATALOG"] + " password=pw_7781"}
    masked = cli("--print-attach", env=env)
    assert masked.returncode == 0 and "pw_7781" not in masked.stdout and "'***'" in masked.stdout
    shown = cli("--print-attach", "--show-secrets", env=env)
    assert "pw_7781" in shown.stdout


def test_print_attach_output_opens_the_lake_in_a_fresh_duckdb(lake_env, cli):
    import duckdb

    run_cli("insert_event_data_loop.py", "--rows", "100", env=lake_env)
    assert cli("--run", "--engine", "dlt", env=lake_env).returncode == 0
    script = cli("--print-attach", env=lake_env).stdout  # no password set: nothing to mask, it works as printed
    assert "PASSWORD ''" in script and "'***'" not in script
    con = duckdb.connect()
    for statement in script.split(";\n"):
        if statement.strip() and not statement.lstrip().startswith("--"):
            con.execute(statement)
    assert con.execute("SELECT count(*) FROM lake.main.events").fetchone()[0] == 100
    # and in the duckdb CLI the way the header says to get it
    import shutil
    import subprocess

    if shutil.which("uv"):
        command = script.splitlines()[0].split("`")[1].split()  # uv tool run --from duckdb-cli==X duckdb
        statements = [s for s in script.splitlines() if not s.startswith("--")]
        cli_run = subprocess.run([*command, "-csv", "-c", "\n".join([*statements, "SELECT count(*) FROM lake.main.events;"])],
                                 capture_output=True, text=True, timeout=300)
        assert cli_run.returncode == 0 and cli_run.stdout.strip().splitlines()[-1] == "100", cli_run.stderr


def test_status_json_reports_watermark_and_rows(lake_env, cli):
    import json

    run_cli("insert_event_data_loop.py", "--rows", "50", env=lake_env)
    cli("--run", "--engine", "dlt", env=lake_env)
    result = cli("--status", "--json", env=lake_env)
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["lake_rows"] == 50 and status["watermark"] and status["source_rows_after_watermark"] == 0


def test_status_before_the_first_run_says_the_lake_is_not_created_yet(settings, lake_env, cli):
    import json

    from tests.helpers import add_events

    add_events(settings, 25, seed=96)
    result = cli("--status", "--json", env=lake_env)
    assert result.returncode == 1, result.stdout + result.stderr  # stale: rows waiting, nothing loaded
    status = json.loads(result.stdout)
    assert status["lake_exists"] is False and status["source_rows_after_watermark"] == 25
    assert status["health"]["state"] == "stale" and "nothing loaded yet" in status["health"]["reasons"][0]
    text = cli("--status", env=lake_env)
    assert "not created yet (the first --run creates it)" in text.stdout, text.stdout + text.stderr


def test_status_is_never_healthy_for_a_lake_that_never_loaded(lake_env, cli):
    """`event-lake status` in an empty folder said HEALTHY: no source table, nothing ever loaded."""
    import json

    missing = cli("--status", "--json", env={**lake_env, "SOURCE_TABLE": "public.nothing_here"})
    assert missing.returncode == 2, missing.stdout + missing.stderr
    reasons = json.loads(missing.stdout)["health"]["reasons"]
    assert any("public.nothing_here does not exist" in r for r in reasons), reasons
    run_cli("insert_event_data_loop.py", "--rows", "0", env=lake_env)  # the table, empty
    empty = cli("--status", "--json", env=lake_env)
    assert empty.returncode == 1 and "nothing loaded yet" in json.loads(empty.stdout)["health"]["reasons"][0]
