"""Ad-hoc SQL and named analysis queries: exact JSON shape, true counts, time travel,
read-only by default, failing statements (20 concurrent writers: tests/e2e/test_crashes.py)."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_main
from tests.helpers import add_events, lake_query, run

ANALYSIS = sorted((ROOT / "sql" / "analysis").glob("*.sql"))


def load_history(env: dict[str, str]) -> dict:
    """Three loads: 300 events, +200, +100 late ones. Returns the env, its settings and the data
    snapshots."""
    from pipeline.settings import load_settings

    settings, snapshots = load_settings(env), []
    for rows, seed, late in ((300, 1, None), (200, 2, None), (100, 3, timedelta(minutes=5))):
        add_events(settings, rows, seed=seed, late_by=late)
        snapshots += run(settings, engine="dlt").snapshots
    return {"env": env, "settings": settings, "snapshots": snapshots}


@pytest.fixture(scope="module")
def lake_with_history(shared_lake_env) -> dict:
    """:func:`load_history` once for the module's tests that only read (they assert the lake as
    loaded; a test that writes uses :func:`scratch_history`)."""
    return load_history(shared_lake_env("history"))


@pytest.fixture(scope="module")
def scratch_history(shared_lake_env) -> dict:
    """:func:`load_history` for the module's tests that write: each writes tables of its own
    names, and none asserts on the snapshot list the others add to."""
    return load_history(shared_lake_env("scratch"))


def lake_count(env: dict[str, str], sql: str) -> int:
    from pipeline.settings import load_settings

    return lake_query(load_settings(env), sql)[0][0]


def sql_json(env, *args: str):
    result = run_main("--json", *args, env=env)
    return result, json.loads(result.stdout)


def test_json_output_has_the_documented_shape_and_true_counts(lake_with_history):
    env = lake_with_history["env"]
    result, out = sql_json(env, "--sql", "-- leading comment\nSELECT count(*) AS n FROM lake.main.events",
                           "--sql", "WITH t AS (SELECT event_type FROM lake.main.events) SELECT DISTINCT "
                           "event_type FROM t ORDER BY 1", "--sql", "DESCRIBE lake.main.events",
                           "--sql", "SHOW ALL TABLES", "--sql", "CALL pragma_version()")
    assert result.returncode == 0, result.stderr
    assert out["status"] == "ok"
    commands = out["result"]["commands"]
    assert out["result"]["command_count"] == 5 == len(commands)
    assert [c["command_index"] for c in commands] == [0, 1, 2, 3, 4]
    assert commands[0] == {"command_index": 0, "row_count": 1, "columns": ["n"], "rows": [{"n": 600}]}
    # the five event columns, then the payload keys TYPED_KEYS=auto typed (the generator's user_id)
    assert commands[1]["row_count"] == 5
    assert [row["column_name"] for row in commands[2]["rows"]] == \
        ["event_id", "event_type", "event_timestamp", "details", "created_at", "details_user_id",
         "_el_known_snapshot"]
    assert all({"command_index", "row_count", "columns", "rows"} <= c.keys() for c in commands)
    info = out["catalog_info"]
    assert set(info) == {"catalog_name", "snapshot_count", "latest_snapshot", "table_count", "tables"}
    real_count = lake_count(env, "SELECT count(*) FROM lake.snapshots()")
    assert info["catalog_name"] == "lake" and info["snapshot_count"] == real_count
    assert info["latest_snapshot"]["snapshot_id"] == max(lake_with_history["snapshots"])
    assert {"snapshot_id", "snapshot_time", "commit_message"} <= info["latest_snapshot"].keys()
    assert any(t["schema"] == "main" and t["name"] == "events" for t in info["tables"])


def test_catalog_info_keeps_equal_table_names_in_two_schemas_apart(scratch_history, cli):
    env = scratch_history["env"]
    made = cli("--write", "--sql", "CREATE SCHEMA archive",
                   "--sql", "CREATE TABLE archive.events AS SELECT * FROM main.events LIMIT 0", env=env)
    assert made.returncode == 0, made.stdout + made.stderr
    _, out = sql_json(env, "--sql", "SELECT 1")
    tables = {(t["schema"], t["name"]): t for t in out["catalog_info"]["tables"]}
    main_files = lake_count(env, "SELECT count(*) FROM ducklake_list_files('lake', 'events', schema => 'main')")
    assert main_files > 0
    assert tables[("main", "events")]["data_files"] == main_files  # not doubled by the namesake
    assert tables[("archive", "events")]["data_files"] == 0  # not given main's files
    assert out["catalog_info"]["table_count"] == len(out["catalog_info"]["tables"])


def test_values_are_json_safe(lake_with_history):
    _, out = sql_json(lake_with_history["env"], "--sql",
                      # details::JSON: a zero-copy lake holds the JSON text as VARCHAR
                      "SELECT event_timestamp, details::JSON AS details, event_id, 12.30::DECIMAL(10,2) AS amount "
                      "FROM lake.main.events LIMIT 1")
    row = out["result"]["commands"][0]["rows"][0]
    assert isinstance(row["details"], dict) and row["details"]
    assert "T" in row["event_timestamp"] and row["event_timestamp"].endswith("+00:00")
    assert len(row["event_id"]) == 36
    assert Decimal(str(row["amount"])) == Decimal("12.30")


def test_write_is_refused_without_the_write_flag(lake_with_history):
    env = lake_with_history["env"]
    result, out = sql_json(env, "--sql", "SELECT 1", "--sql", "DELETE FROM lake.main.events")
    assert result.returncode == 1
    assert out["status"] == "error" and out["error"]["command_index"] == 1
    assert "read-only" in out["error"]["message"]
    assert lake_count(env, "SELECT count(*) FROM lake.main.events") == 600


def test_write_flag_counts_affected_rows(scratch_history):
    env = scratch_history["env"]
    result, out = sql_json(env, "--write", "--sql", "CREATE TABLE lake.main.notes (id INT, note VARCHAR)",
                           "--sql", "INSERT INTO lake.main.notes VALUES (1, 'a'), (2, 'b'), (3, 'c')",
                           "--sql", "UPDATE lake.main.notes SET note = 'z' WHERE id < 3",
                           "--sql", "DELETE FROM lake.main.notes WHERE id = 3")
    assert result.returncode == 0, result.stderr
    affected = [c.get("affected_rows") for c in out["result"]["commands"]]
    assert affected == [0, 3, 2, 1]
    assert all(c["status"] == "ok" for c in out["result"]["commands"])


def test_a_failing_statement_reports_its_index_and_exits_non_zero(lake_with_history):
    result, out = sql_json(lake_with_history["env"], "--sql", "SELECT 1", "--sql", "SELECT * FROM nope")
    assert result.returncode == 1
    assert out["status"] == "error" and out["error"]["command_index"] == 1
    assert "nope" in out["error"]["message"]
    assert out["result"]["command_count"] == 1
    # stdout: JSON only; the last line counts statements as people do, and says it ran and failed
    assert result.stderr.strip().splitlines()[-1].startswith("Failed: statement 2 failed: ")


def test_at_version_reads_the_whole_session_at_that_snapshot(lake_with_history, cli):
    env, snaps = lake_with_history["env"], lake_with_history["snapshots"]
    _, out = sql_json(env, "--at-version", str(snaps[0]), "--sql", "SELECT count(*) AS n FROM lake.main.events",
                      "--sql", "SELECT count(*) AS n FROM lake.ops.batches")
    assert [c["rows"][0]["n"] for c in out["result"]["commands"]] == [300, 1]
    result = run_main("--at-version", "9999", "--sql", "SELECT 1", env=env)
    assert result.returncode == 1 and "--snapshots" in result.stderr


def test_at_time_reads_the_lake_as_of_a_timestamp(lake_with_history):
    env, snaps, settings = lake_with_history["env"], lake_with_history["snapshots"], lake_with_history["settings"]
    [(at,)] = lake_query(settings, f"SELECT snapshot_time FROM lake.snapshots() WHERE snapshot_id = {snaps[1]}")
    _, out = sql_json(env, "--at-time", at.isoformat(), "--sql", "SELECT count(*) AS n FROM lake.main.events")
    assert out["result"]["commands"][0]["rows"][0]["n"] == 500


def test_snapshots_and_changes(lake_with_history, cli):
    env, snaps = lake_with_history["env"], lake_with_history["snapshots"]
    _, listed = sql_json(env, "--snapshots")
    ids = [r["snapshot_id"] for r in listed["result"]["commands"][0]["rows"]]
    assert set(snaps) <= set(ids)
    _, out = sql_json(env, "--changes", str(snaps[1]), str(snaps[2]))
    rows = out["result"]["commands"][0]["rows"]
    assert len(rows) == 300 and {r["change_type"] for r in rows} == {"insert"}
    # for programs: every column, table ids in changes replaced by names
    inserted = [r["changes"]["tables_inserted_into"] for r in listed["result"]["commands"][0]["rows"]
                if "tables_inserted_into" in r["changes"]]
    assert inserted and all(names == ["main.events"] for names in inserted)
    # for people: one short line per snapshot, changes in words with table names, not ids
    # (was: 600-character rows of JSON maps holding internal table ids such as ["5"])
    text = cli("--snapshots", env=env)
    lines = text.stdout.splitlines()
    assert text.returncode == 0 and lines[0].split() == ["snapshot", "time", "(UTC)", "author", "changes", "message"]
    assert "insert main.events" in text.stdout and '["' not in text.stdout
    assert max(len(line) for line in lines) < 220, max(lines, key=len)
    # the change feed for people: a count per snapshot first, then rows with wide values cut
    # (was 100 rows of ~550 characters: the whole JSON of each event's details)
    feed = cli("--changes", str(snaps[1]), str(snaps[2]), env=env)
    assert feed.returncode == 0, feed.stderr
    head = feed.stdout.splitlines()
    assert head[0].split() == ["snapshot_id", "change_type", "rows"]
    summary = [line.split() for line in head[2:next(i for i, line in enumerate(head) if line.startswith("("))]]
    assert sum(int(n) for _, _, n in summary) == 300 and {kind for _, kind, _ in summary} == {"insert"}
    assert summary[0][0] == str(snaps[1])  # the first snapshot named is in the feed: both included
    assert max(len(line) for line in head) < 400 and "…" in feed.stdout, max(head, key=len)
    assert "(both included)" in feed.stdout and "--format jsonl" in feed.stdout


def test_human_output_is_an_aligned_table(lake_with_history, cli):
    result = run_main("--sql", "SELECT 1 AS a, 'xyz' AS long_name",
                     env=lake_with_history["env"])
    lines = result.stdout.splitlines()
    assert lines[0] == "a  long_name" and lines[1] == "-  ---------" and lines[2] == "1  xyz"


@pytest.fixture(scope="module")
def renamed_lake(shared_lake_env) -> dict:
    """:func:`load_history` in a lake attached under another DUCKLAKE_NAME than the default."""
    return load_history({**shared_lake_env("renamed"), "DUCKLAKE_NAME": "analytics"})


@pytest.mark.parametrize("path", ANALYSIS, ids=[p.name for p in ANALYSIS])
def test_every_named_analysis_query_runs_and_is_documented(path: Path, renamed_lake):
    """Named queries name no catalog: they run on a lake attached as `analytics`."""
    header = path.read_text().splitlines()[:3]
    assert header[0].startswith("-- ") and any("Parameters:" in line for line in path.read_text().splitlines()[:6])
    assert "lake." not in path.read_text() and "'lake'" not in path.read_text()
    snaps = renamed_lake["snapshots"]
    result, out = sql_json(renamed_lake["env"], "--sql-file", str(path),
                           "--param", f"version={snaps[0]}", "--param", "user_id=user_000000",
                           "--param", f"from_snapshot={snaps[0]}", "--param", f"to_snapshot={snaps[-1]}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert out["status"] == "ok" and out["result"]["commands"][-1]["row_count"] >= 0


def test_named_queries_return_the_right_numbers(lake_with_history):
    env, snaps, settings = lake_with_history["env"], lake_with_history["snapshots"], lake_with_history["settings"]
    _, out = sql_json(env, "--sql-file", "sql/analysis/events_by_type_version_diff.sql",
                      "--param", f"version={snaps[0]}")
    rows = out["result"]["commands"][0]["rows"]
    assert sum(r["at_version"] for r in rows) == 300 and sum(r["difference"] for r in rows) == 300
    _, out = sql_json(env, "--sql-file", "sql/analysis/lake_health.sql")
    health = {r["table_name"]: r for r in out["result"]["commands"][0]["rows"]}
    assert health["events"]["live_rows"] == 600
    [(critical,)] = lake_query(settings, "SELECT count(*) FROM lake.main.events WHERE event_type = "
                                         "'error_occurred' AND (details->>'severity') = 'critical'")
    _, out = sql_json(env, "--sql-file", "sql/analysis/critical_errors_between_snapshots.sql",
                      "--param", f"from_snapshot={snaps[0]}", "--param", f"to_snapshot={snaps[-1]}")
    assert out["result"]["commands"][0]["row_count"] == critical


def test_missing_parameter_names_the_flag(lake_with_history, cli):
    result = run_main("--sql-file", "sql/analysis/user_journey_at_version.sql",
                     env=lake_with_history["env"])
    assert result.returncode == 1 and "--param" in result.stderr


def test_unqualified_names_resolve_in_the_lake_and_outlive_the_process(scratch_history):
    """The workflow-engine docs' own SQL, verbatim: the lake is the session's default catalog."""
    env, snaps = scratch_history["env"], scratch_history["snapshots"]
    result, out = sql_json(env, "--write", "--sql", "CREATE TABLE sales (id INTEGER, amount DOUBLE)",
                           "--sql", "INSERT INTO sales VALUES (1, 9.5), (2, 3.0)")
    assert result.returncode == 0, result.stdout + result.stderr
    _, out = sql_json(env, "--sql", "SELECT count(*) AS n, sum(amount) AS total FROM sales",
                      "--sql", "SELECT count(*) AS n FROM events",
                      "--sql", f"SELECT count(*) AS n FROM table_changes('events', {snaps[1]}, {snaps[2]})")
    assert [c["rows"][0]["n"] for c in out["result"]["commands"]] == [2, 600, 300]
    assert out["result"]["commands"][0]["rows"][0]["total"] == 12.5


def test_create_as_and_merge_report_their_rows_and_an_open_transaction_fails(scratch_history):
    env = scratch_history["env"]
    result, out = sql_json(env, "--write", "--sql", "CREATE TABLE ten AS SELECT range AS id FROM range(10)",
                           "--sql", "MERGE INTO ten USING (SELECT 3 AS id UNION ALL SELECT 42) s "
                                    "ON ten.id = s.id WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN "
                                    "INSERT VALUES (s.id)")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [c["affected_rows"] for c in out["result"]["commands"]] == [10, 2]
    result, out = sql_json(env, "--write", "--sql", "BEGIN", "--sql", "CREATE TABLE lost (i INT)",
                           "--sql", "INSERT INTO lost VALUES (1)")
    assert result.returncode == 1 and out["status"] == "error"
    assert "BEGIN without COMMIT" in out["error"]["message"]
    _, out = sql_json(env, "--sql", "SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = 'lost'")
    assert out["result"]["commands"][0]["rows"][0]["n"] == 0


def test_python_sql_refuses_a_statement_holding_a_nul_by_name(lake_with_history):
    """A NUL in the text raised DuckDB's own ParserException from Pipeline.sql (found by an adversary)."""
    from pipeline.errors import ConfigError
    from pipeline.ops.pipeline import Pipeline
    from pipeline.settings import load_settings

    with Pipeline(load_settings(lake_with_history["env"])) as pipeline, \
            pytest.raises(ConfigError, match="NUL character"):
        pipeline.sql("SELECT 1\x00")
