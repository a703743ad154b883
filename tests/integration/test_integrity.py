"""A lake's own integrity is part of its health: a registered file that changed or went away, or a
data folder whose marker names another lake, makes --status failing with the file named."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from pipeline.settings import load_settings
from tests.helpers import add_events, lake_query, run


def _loaded(lake_env: dict[str, str]) -> tuple[dict[str, str], Path]:
    settings = load_settings(lake_env)
    add_events(settings, 200, seed=7)
    run(settings, engine="dlt")
    [[path]] = lake_query(settings, "SELECT data_file FROM ducklake_list_files('lake', 'events') LIMIT 1")
    return lake_env, Path(path)


def _status(cli, env) -> tuple[int, dict]:
    result = cli("--status", "--json", env=env)
    return result.returncode, json.loads(result.stdout)


def test_a_healthy_lake_checks_every_registered_file(lake_env, cli):
    env, _ = _loaded(lake_env)
    code, status = _status(cli, env)
    assert code == 0, status["health"]
    assert status["integrity"]["files_checked"] >= 1
    assert status["integrity"]["damaged_files"] == [] and status["integrity"]["marker_problem"] is None


def test_an_overwritten_lake_file_makes_status_failing_with_the_file_named(lake_env, cli):
    env, path = _loaded(lake_env)
    path.write_bytes(b"PAR1 not the lake's file PAR1")  # what EXPLAIN ANALYZE COPY … TO '<file>' did
    code, status = _status(cli, env)
    assert code == 2 and status["health"]["state"] == "failing"
    [damage] = status["integrity"]["damaged_files"]
    assert path.name in damage and "registered as" in damage
    assert any(path.name in reason and "Restore" in reason and "(--at-version)" in reason
               for reason in status["health"]["reasons"])
    from pipeline.ops.metrics import families
    from pipeline.ops.observe import Observer
    from pipeline.settings.resolve import resolve

    gauges = {m.name: m.samples[0].value for m in families(Observer(resolve(load_settings(env))).observe()) if m.samples}
    assert gauges["event_lake_damaged_files"] == 1


def test_a_deleted_lake_file_makes_status_failing(lake_env, cli):
    env, path = _loaded(lake_env)
    path.unlink()
    code, status = _status(cli, env)
    assert code == 2
    assert [d for d in status["integrity"]["damaged_files"] if path.name in d and "missing" in d]


def test_a_damaged_file_of_any_table_of_an_image_is_named_whichever_table_is_listed_first(lake_env, cli):
    """Each table's payload drift is read in a read of its own: the first table's damaged file
    (its drift read fails) aborted the one read every table shared, and --status failed with
    "Current transaction is aborted" instead of naming the file."""
    from tests.helpers import write_payloads

    env = {**lake_env, "SOURCE_TABLES": "public.events,public.clicks"}
    settings = load_settings(env)
    for table in ("public.events", "public.clicks"):
        write_payloads(settings, [("click", '{"user_id": 1}')] * 20, ago=timedelta(minutes=2), table=table)
    run(settings, engine="dlt")
    [[path]] = lake_query(settings, "SELECT data_file FROM ducklake_list_files('lake', 'events') LIMIT 1")
    Path(path).unlink()
    for order in ("public.events,public.clicks", "public.clicks,public.events"):
        code, status = _status(cli, {**env, "SOURCE_TABLES": order})
        assert code == 2 and status["health"]["state"] == "failing", status
        assert [d for d in status["integrity"]["damaged_files"] if Path(path).name in d and "missing" in d]
        assert set(status["tables"]) == {"events", "clicks"}


def test_a_marker_naming_another_lake_makes_status_failing(lake_env, cli):
    env, _ = _loaded(lake_env)
    marker = Path(env["DUCKLAKE_DATA_PATH"]) / ".event-lake.json"
    claim = json.loads(marker.read_text())
    marker.write_text(json.dumps({**claim, "lake_id": "someone-else", "lake_name": "other"}))
    code, status = _status(cli, env)
    assert code == 2
    assert "names another lake (other" in status["integrity"]["marker_problem"]
    assert any("names another lake" in reason for reason in status["health"]["reasons"])
