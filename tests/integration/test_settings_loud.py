"""Settings that fail loudly: an unparsable .env, an out-of-range duration, a malformed DSN
and a bad port stop the command with one line naming the key, never a piece of a password."""

from __future__ import annotations

from pathlib import Path

from pipeline.settings import load_settings


def test_an_unparsable_env_file_stops_every_command_with_the_file_and_line(tmp_path: Path, lake_env, cli):
    (tmp_path / ".env").write_text("LOOKBACK=15m\n# a comment\nDUCKLAKE_CATALOG=\"postgresql://app:s3cret@h/db\n")
    for args in (("--run", "--engine", "dlt"), ("--status",), ("--doctor",), ("--sql", "SELECT 1")):
        result = cli(*args, env={"EVENT_LAKE_HOME": str(tmp_path / "home")}, cwd=tmp_path)
        assert result.returncode == 1, args
        assert f"{tmp_path / '.env'} line 3 (starting 'DUCKLAKE_CATALOG') cannot be parsed" in result.stderr
        assert "s3cret" not in result.stdout + result.stderr
    assert not (tmp_path / "home").exists()  # no embedded lake was started in its place


def test_a_misspelled_key_stops_the_command_before_an_embedded_catalog_starts(tmp_path: Path, lake_env, cli):
    """DUCKLAKE_CATALGO beside a real SOURCE_PG_DSN was ignored: the command started an embedded
    catalog and loaded into it, exit 0. A key that looks like a setting but is none is an error
    with the nearest setting, from .env and from the environment alike."""
    source = lake_env["SOURCE_PG_DSN"]
    (tmp_path / ".env").write_text(f"SOURCE_PG_DSN='{source}'\nDUCKLAKE_CATALGO=postgresql://app:s3cret@h/db\n")
    home = tmp_path / "home"
    for args in (("--run", "--engine", "dlt"), ("--status",), ("--sql", "SELECT 1")):
        result = cli(*args, env={"EVENT_LAKE_HOME": str(home)}, cwd=tmp_path)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert "DUCKLAKE_CATALGO (in " in result.stderr and "did you mean DUCKLAKE_CATALOG?" in result.stderr
        assert "s3cret" not in result.stdout + result.stderr
    assert not home.exists()  # no embedded lake was started in its place
    result = cli("--status", env={**lake_env, "DUCKLAKE_DATAPATH": "/tmp/elsewhere/"})
    assert result.returncode == 1 and "did you mean DUCKLAKE_DATA_PATH?" in result.stderr
    result = cli("--status", env={**lake_env, "SOURCE_SCHEMA_NAME": "x"})  # ours by its prefix
    assert result.returncode == 1 and "SOURCE_SCHEMA_NAME (in the environment) is not a setting." in result.stderr


def test_reconcile_since_flag_is_bounded_and_named(lake_env, cli):
    result = cli("--reconcile", "--since", "999999d", env=lake_env)
    assert result.returncode == 1 and "--since '999999d' is longer than" in result.stderr


def test_a_bad_metrics_port_stops_only_the_commands_that_serve(lake_env, cli):
    env = {**lake_env, "METRICS_PORT": "99999"}
    assert load_settings(env).metrics_port_text == "99999"  # loading alone is fine
    served = cli("--serve", env=env)
    assert served.returncode == 1 and "METRICS_PORT '99999' is not a port number" in served.stderr
    status = cli("--status", "--json", env=env)  # uses no port: unaffected
    assert "METRICS_PORT" not in status.stdout + status.stderr


def test_a_configured_source_never_meets_a_silently_started_embedded_catalog(tmp_path: Path, lake_env, cli):
    home = tmp_path / "home"
    env = {"SOURCE_PG_DSN": lake_env["SOURCE_PG_DSN"], "EVENT_LAKE_HOME": str(home)}
    result = cli("--run", "--engine", "dlt", env=env)
    assert result.returncode == 1
    assert "SOURCE_PG_DSN is set" in result.stderr and "DUCKLAKE_CATALOG=embedded" in result.stderr
    assert not home.exists()  # nothing was started


def test_zero_and_negative_durations_are_said(lake_env, cli):
    """--retention 0 dropped all time travel without a word, --lookback 0 all late events, and
    --retention -1d got argparse's usage dump."""
    negative = cli("--maintain", "--dry-run", "--retention", "-1d", env=lake_env)
    assert negative.returncode == 1 and "usage:" not in negative.stderr
    assert "--retention '-1d' is negative" in negative.stderr
    zero = cli("--status", "--retention", "0", "--lookback", "0", env=lake_env)
    assert "--retention is 0: maintenance expires every snapshot but the latest" in zero.stderr
    assert "--lookback is 0" in zero.stderr and "--reconcile" in zero.stderr


def test_a_changed_data_path_names_the_lakes_own_and_no_setting_of_duckdb(tmp_path: Path, lake_env, cli):
    """DUCKLAKE_DATA_PATH changed under an existing lake printed DuckDB's advice to set
    OVERRIDE_DATA_PATH (no setting here) and a hint to check DUCKLAKE_CATALOG's password."""
    from tests.helpers import add_events

    add_events(load_settings(lake_env), 50, seed=41)
    assert cli("--run", "--engine", "dlt", env=lake_env).returncode == 0
    kept, moved = lake_env["DUCKLAKE_DATA_PATH"], str(tmp_path / "elsewhere") + "/"
    for args in (("--run", "--engine", "dlt"), ("--status",)):
        result = cli(*args, env={**lake_env, "DUCKLAKE_DATA_PATH": moved})
        assert result.returncode != 0, (args, result.stdout, result.stderr)
        assert f"keeps its data files in {kept}, but DUCKLAKE_DATA_PATH is {moved}" in result.stderr, result.stderr
        assert f"Set DUCKLAKE_DATA_PATH={kept}" in result.stderr
        assert "OVERRIDE_DATA_PATH" not in result.stderr and "password" not in result.stderr
