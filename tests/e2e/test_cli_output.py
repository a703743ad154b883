"""What the CLI writes where: progress on a terminal only, JSON log lines for shippers,
`--quiet`, and `--format csv|jsonl` rows that parse."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import pty
import select
import subprocess
import sys

import pytest

from pipeline.settings import load_settings
from tests.conftest import ROOT, run_cli, run_main
from tests.helpers import add_events, run

CLEAR_LINE = "\x1b[2K"  # what a progress redraw writes before its text


def on_a_terminal(script: str, *args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Run a CLI with stderr on a pseudo-terminal (as in an interactive shell) and stdout piped;
    returns (exit code, stdout, what the terminal showed)."""
    parent, child = pty.openpty()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SOURCE_", "DUCKLAKE_"))}
    process = subprocess.Popen([sys.executable, str(ROOT / script), *args], cwd=ROOT, env={**full_env, **env},
                               stdout=subprocess.PIPE, stderr=child, text=True)
    os.close(child)
    shown = b""
    while True:
        ready, _, _ = select.select([parent], [], [], 1)
        if ready:
            try:
                chunk = os.read(parent, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        elif process.poll() is not None:
            break
    os.close(parent)
    code = process.wait(timeout=300)
    return code, process.stdout.read(), shown.decode(errors="replace")


def test_progress_is_drawn_on_a_terminal_and_never_into_a_pipe(lake_env):
    code, _, shown = on_a_terminal("insert_event_data_loop.py", "--rows", "3000", "--batch-size", "1000",
                                   "--workers", "1", env=lake_env)
    assert code == 0 and CLEAR_LINE in shown
    assert "loop 1: 1,000/3,000 events (33%)" in shown and "events/s" in shown
    piped = run_cli("insert_event_data_loop.py", "--rows", "300", env=lake_env)
    assert piped.returncode == 0 and CLEAR_LINE not in piped.stdout + piped.stderr

    code, out, shown = on_a_terminal("events_pipeline.py", "--run", env=lake_env)
    assert code == 0, shown
    assert "extracting with spark: 3,300/3,300 rows (100%)" in shown and "rows/s" in shown
    assert "promoting " in shown and "3,300 new" in shown
    assert CLEAR_LINE not in out  # stdout (results) never carries progress
    code, _, shown = on_a_terminal("events_pipeline.py", "--verify", env=lake_env)
    assert code == 0 and "comparing lake and source:" in shown  # it was silent for 15-20 s on 2-3M rows

    add_events(load_settings(lake_env), 200, seed=5)
    # --quiet is the logging's, whatever the engine: dlt spares a second JVM start
    code, out, shown = on_a_terminal("events_pipeline.py", "--run", "--quiet", "--engine", "dlt", env=lake_env)
    assert code == 0 and out.strip().startswith("Done:"), shown
    assert CLEAR_LINE not in shown and " INFO " not in shown  # --quiet: warnings and errors only


@pytest.fixture
def small_lake(settings, lake_env) -> dict[str, str]:
    add_events(settings, 120, seed=4)
    run(settings, engine="dlt")
    return lake_env


def test_log_format_json_gives_one_object_per_line(small_lake):
    result = run_cli("events_pipeline.py", "--run", "--engine", "dlt", "--log-format", "json", env=small_lake)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]  # every line parses
    assert lines and all({"time", "level", "run", "logger", "message"} <= line.keys() for line in lines)
    assert all(line["time"].endswith("Z") and line["level"] in {"DEBUG", "INFO", "WARNING", "ERROR"}
               for line in lines)
    assert len({line["run"] for line in lines}) == 1
    assert result.stdout.strip().startswith("Done:")


def test_format_csv_and_jsonl_print_only_rows(small_lake):
    query = ("SELECT event_type, count(*) AS n, NULL AS nothing, {'a': 1} AS nested FROM lake.main.events "
             "GROUP BY ALL ORDER BY event_type")
    as_csv = run_main("--sql", query, "--format", "csv", env=small_lake)
    assert as_csv.returncode == 0, as_csv.stderr
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert sum(int(r["n"]) for r in rows) == 120 and rows[0]["nothing"] == ""
    assert json.loads(rows[0]["nested"]) == {"a": 1}
    as_jsonl = run_main("--sql", query, "--format", "jsonl", env=small_lake)
    records = [json.loads(line) for line in as_jsonl.stdout.splitlines()]
    assert [r["event_type"] for r in records] == [r["event_type"] for r in rows]
    assert records[0]["nothing"] is None and records[0]["nested"] == {"a": 1}
    snapshots = run_main("--snapshots", "--format", "jsonl", env=small_lake)
    assert all("snapshot_id" in json.loads(line) for line in snapshots.stdout.splitlines())

    wrong = run_main("--status", "--format", "csv", env=small_lake)
    assert wrong.returncode == 1 and wrong.stdout == "" and "--format csv is for commands" in wrong.stderr
    clash = run_main("--sql", "SELECT 1", "--json", "--format", "csv", env=small_lake)
    assert clash.returncode == 1 and clash.stdout == "" and "two formats" in clash.stderr
    failed = run_main("--sql", "SELECT nope", "--format", "jsonl", env=small_lake)
    assert failed.returncode == 1 and failed.stdout == "" and "nope" in failed.stderr


def test_an_error_on_a_terminal_is_said_once(lake_env):
    """On a terminal the error and its hint were followed by "Failed: <the same error>"."""
    parent, child = pty.openpty()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SOURCE_", "DUCKLAKE_"))}
    process = subprocess.Popen([sys.executable, str(ROOT / "events_pipeline.py"), "--status"], cwd=ROOT,
                               env={**full_env, **lake_env, "DUCKLAKE_CATALOG": "mysql://x"},
                               stdout=child, stderr=child)
    os.close(child)
    shown = b""
    with contextlib.suppress(OSError):
        while chunk := os.read(parent, 65536):
            shown += chunk
    os.close(parent)
    assert process.wait(60) == 1
    text = shown.decode(errors="replace")
    assert text.count("is not a catalog this pipeline understands") == 1, text
    assert text.strip().splitlines()[-1].strip() == "Failed.", text
    piped = run_cli("events_pipeline.py", "--status", env={**lake_env, "DUCKLAKE_CATALOG": "mysql://x"})
    assert piped.stdout.startswith("Failed: ")  # a script reading stdout still gets the reason
