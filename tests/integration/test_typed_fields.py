"""Typed payload fields (TYPED_KEYS): the seed's query, ``details->>'user_id' = …``, returns the same
rows at every snapshot whether it reads the typed column or the JSON — on a lake whose keys were
typed after its first loads, with a key that changes type, a key missing in some event types, rows
promoted by copy, by zero-copy and from a batch staged before the key was typed; drift is reported."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest

from pipeline.ops.pipeline import Pipeline
from pipeline.settings import load_settings
from tests.conftest import run_main
from tests.helpers import (
    assert_lake_equals_source,
    commit_infos,
    lake_query,
    run,
    snapshot_ids,
    write_payloads,
)


def _write(settings, payloads: list[tuple[str, object]], *, ago: timedelta = timedelta(minutes=30)) -> None:
    """Rows (event type, details as a Python value; None: SQL NULL) dated ``ago`` before now."""
    write_payloads(settings, [(kind, None if details is None else json.dumps(details)) for kind, details in payloads],
                   ago=ago)


def _mixed(round_: int, user_id_as_number: bool = False) -> list[tuple[str, object]]:
    """Page views with a user (text, or a number), signups without one, purchases with a numeric
    user and an amount, a JSON null, a missing payload, a payload that is not an object."""
    rows: list[tuple[str, object]] = []
    for i in range(12):
        user: object = i % 4 if user_id_as_number else f"u{i % 4}"
        rows.append(("page_view", {"user_id": user, "page": f"/r{round_}/{i}"}))
    rows += [("signup", {"email": f"e{round_}-{i}@example.com"}) for i in range(3)]
    rows += [("purchase", {"user_id": 1, "amount": 12.5 + round_}), ("purchase", {"user_id": "1", "amount": 3})]
    rows += [("page_view", {"user_id": None}), ("page_view", None), ("page_view", ["u1"]),
             ("page_view", {"user_id": {"nested": "u1"}})]
    return rows


# a text value, a number's text (typed as a number in some rows, text in others), NULLs (a JSON null, a
# missing key, a non-object payload), a list
PROBES = ["= 'u1'", "= '1'", "IS NULL", "IN ('u2', '3', 'nobody')"]
# conditions before the arrow, as the seed's change-feed question writes them (DuckDB reads
# ``a AND details->>'k' = v`` as ``(a AND details)->>'k' = v``): as written, and parsed by hand
BEFORE = [("event_type = 'page_view' AND ", "event_type = 'page_view' AND "),
          ("event_id IS NOT NULL AND details->>'amount' IS NULL AND ",
           "event_id IS NOT NULL AND json_extract_string(details, 'amount') IS NULL AND ")]


def _both_forms(settings, version: int, probe: str, before: tuple[str, str] = ("", "")) -> tuple[list, list]:
    """The seed's form, as --sql runs it, and the same filter through a function the rewrite never
    touches (json_extract_string parses every row's JSON)."""
    with Pipeline(settings) as pipeline:
        served = pipeline.at(version=version).sql(
            f"SELECT event_id FROM lake.events AT (VERSION => {version}) WHERE {before[0]}details->>'user_id' "
            f"{probe} ORDER BY event_id").column(0).to_pylist()
    parsed = lake_query(settings, f"SELECT event_id FROM lake.main.events AT (VERSION => {version}) "
                                  f"WHERE {before[1]}json_extract_string(details, 'user_id') {probe} ORDER BY event_id")
    return [str(v) for v in served], [str(row[0]) for row in parsed]


def test_the_seed_query_returns_the_same_rows_at_every_snapshot_typed_or_not(lake_env, caplog):
    untyped = load_settings({**lake_env, "TYPED_KEYS": "none"})
    typed = load_settings({**lake_env, "TYPED_KEYS": "user_id,amount"})
    _write(untyped, _mixed(1), ago=timedelta(hours=3))
    run(untyped)  # zero-copy, no typed column
    _write(untyped, _mixed(2), ago=timedelta(hours=2))
    run(untyped, engine="dlt")  # copy promotion
    _write(untyped, _mixed(3), ago=timedelta(hours=1))
    run(untyped, "extract")  # staged before the keys are typed: its files lack their columns
    before_typing = max(snapshot_ids(typed))
    run(typed)  # types user_id and amount (filling every row), then promotes the staged batch by copy
    _write(typed, _mixed(4, user_id_as_number=True), ago=timedelta(minutes=30))
    run(typed)  # zero-copy: the slice tasks write the typed columns
    _write(typed, _mixed(5), ago=timedelta(minutes=10))
    run(typed, engine="dlt")
    assert_lake_equals_source(typed)

    promoted = [info["tables"]["events"] for info in commit_infos(typed, "tables")]
    # the batch staged before typing went by copy, which fills the columns; the next one's files were
    # written with them and registered (zero-copy)
    assert "copy_reason" in promoted[2] and promoted[2]["files_registered"] == 0
    assert "copy_reason" not in promoted[3] and promoted[3]["files_registered"] > 0
    with Pipeline(typed) as pipeline:
        since = min(key.complete_since for key in pipeline.status().payload.typed)
    assert since > before_typing
    # every row of the latest snapshot holds exactly details->>key in its column
    [(wrong,)] = lake_query(typed, "SELECT count(*) FROM lake.main.events WHERE details_user_id IS DISTINCT "
                                   "FROM (details->>'user_id') OR details_amount IS DISTINCT FROM (details->>'amount')")
    assert wrong == 0
    caplog.set_level(logging.INFO, logger="pipeline.sql_session.query")
    [(made,)] = lake_query(typed, "SELECT min(snapshot_id) FROM lake.snapshots() "
                                  "WHERE list_contains(map_keys(changes), 'tables_created')")
    for version in [v for v in snapshot_ids(typed) if v >= made]:
        for probe in PROBES:
            caplog.clear()
            served, parsed = _both_forms(typed, version, probe)
            assert served == parsed, (version, probe)
            from_column = "served from typed column" in caplog.text
            assert from_column == (version >= since), (version, probe, caplog.text)
    for version in (before_typing, max(snapshot_ids(typed))):  # read from the JSON, then from the column
        for before in BEFORE:
            served, parsed = _both_forms(typed, version, "= 'u1'", before)
            assert served == parsed and served, (version, before)
    # the seed's change feed between the last two snapshots, an arrow after a condition
    previous, latest = sorted(snapshot_ids(typed))[-2:]
    with Pipeline(typed) as pipeline:
        feed = pipeline.sql(f"SELECT count(*) FROM table_changes('events', {previous}, {latest}) "
                            "WHERE event_type = 'page_view' AND details->>'user_id' = 'u1'").column(0).to_pylist()
    assert feed == [c for (c,) in lake_query(
        typed, f"SELECT count(*) FROM lake.table_changes('events', {previous}, {latest}) WHERE event_type = "
               "'page_view' AND json_extract_string(details, 'user_id') = 'u1'")] and feed[0] > 0
    [(users,)] = lake_query(typed, "SELECT count(*) FROM lake.main.events WHERE details->>'user_id' = 'u1'")
    assert users > 0
    # the named journey query, its version a parameter, is served too
    latest = max(snapshot_ids(typed))
    journey = run_main("--sql-file", "user_journey_at_version", "--param", "user_id=u1", "--param",
                       f"version={latest}", "--json", env={**lake_env, "TYPED_KEYS": "user_id,amount"})
    assert journey.returncode == 0, journey.stderr
    assert json.loads(journey.stdout)["result"]["commands"][0]["row_count"] == users
    assert "served from typed column" in journey.stderr


def test_a_batch_staged_before_its_table_typed_a_key_is_promoted_by_copy_which_fills_the_column(lake_env):
    """A first load extracted (the table empty, no key typed), then a key typed before it is promoted:
    no rows were filled, so only the files' columns can tell that they lack the key's."""
    untyped = load_settings({**lake_env, "TYPED_KEYS": "none"})
    typed = load_settings({**lake_env, "TYPED_KEYS": "user_id"})
    _write(untyped, _mixed(1), ago=timedelta(hours=1))
    run(untyped, "extract")
    run(typed)
    [info] = commit_infos(typed, "tables")
    assert info["tables"]["events"]["copy_reason"].startswith("its files lack the table's column(s) details_user_id")
    [(wrong, held)] = lake_query(typed, "SELECT count(*) FILTER (WHERE details_user_id IS DISTINCT FROM "
                                        "(details->>'user_id')), count(details_user_id) FROM lake.main.events")
    assert (wrong, held) == (0, 15)  # 14 scalars and an object, whose ->> is its JSON text
    assert_lake_equals_source(typed)


def test_auto_types_the_hot_keys_of_a_new_table_and_status_reports_drift(lake_env):
    _write(load_settings(lake_env), [("page_view", {"user_id": f"u{i}", "page": f"/p{i % 3}"}) for i in range(40)]
           + [("signup", {"email": f"e{i}"}) for i in range(5)], ago=timedelta(hours=1))
    result = run_main("--run", env=lake_env)
    assert result.returncode == 0, result.stderr
    settings = load_settings(lake_env)
    assert [k for (k,) in lake_query(settings, "SELECT payload_key FROM lake.ops.typed_keys ORDER BY 1")] == \
        ["page", "user_id"]  # in 40 of 45 sampled rows each; email in 5: not typed
    # the payload drifts: user_id becomes a number, session_id appears in every row
    _write(settings, [("page_view", {"user_id": i, "page": "/x", "session_id": f"s{i}", "Page": "P"})
                      for i in range(50)], ago=timedelta(minutes=5))
    assert run_main("--run", env=lake_env).returncode == 0
    status = run_main("--status", "--json", env=lake_env)
    payload = json.loads(status.stdout)["payload"]
    assert {k["key"] for k in payload["typed_keys"]} == {"page", "user_id"}
    words = {d["key"]: d["words"] for d in payload["drift"]}
    assert set(words) == {"session_id", "user_id", "Page"}, words
    assert "now mostly number" in words["user_id"] and "TYPED_KEYS=session_id adds it" in words["session_id"]
    # Page would be details_Page, which is page's column (names ignore case): not advised as a fix
    assert "column names ignore case" in words["Page"] and "TYPED_KEYS" not in words["Page"]
    text = run_main("--status", env=lake_env).stdout
    assert "typed keys" in text and "DRIFT" in text and "session_id" in text
    # the lake stays exact: the numbers are in the column as text
    [(wrong,)] = lake_query(settings, "SELECT count(*) FROM lake.main.events "
                                      "WHERE details_user_id IS DISTINCT FROM (details->>'user_id')")
    assert wrong == 0


def test_keys_differing_only_in_case_are_refused_they_would_share_a_column(lake_env):
    result = run_main("--status", env={**lake_env, "TYPED_KEYS": "user_id,User_ID"})
    assert result.returncode != 0
    assert "TYPED_KEYS: 'User_ID' differs from another key only in case" in result.stderr


@pytest.mark.parametrize("value", ["a.b", "1st", "x" * 60])
def test_a_key_that_cannot_be_a_column_is_refused_with_the_fix(lake_env, value):
    result = run_main("--status", env={**lake_env, "TYPED_KEYS": f"user_id,{value}"})
    assert result.returncode != 0
    assert f"TYPED_KEYS: {value!r} cannot be a typed key" in result.stderr
    assert "TYPED_KEYS=user_id,session_id" in result.stderr


def test_a_sql_session_serving_a_typed_key_imports_no_pandas(lake_env):
    """DuckDB's binding of a Python parameter imports pandas: a session's own reads (the typed keys,
    a snapshot by time) bound their values that way and made ``--sql``'s start 2.5x a bare attach."""
    from tests.conftest import run_cli

    settings = load_settings(lake_env)
    _write(settings, [("page_view", {"user_id": f"u{i % 3}"}) for i in range(30)], ago=timedelta(hours=1))
    assert run_main("--run", "--engine", "dlt", env=lake_env).returncode == 0
    [(version, made)] = lake_query(settings, "SELECT max(snapshot_id), max(snapshot_time) FROM lake.snapshots()")
    seed = "SELECT count(*) AS n FROM events AT ({}) WHERE details->>'user_id' = 'u1'"
    for clause in (f"VERSION => {version}", f"TIMESTAMP => '{made.isoformat()}'"):
        result = run_cli("events_pipeline.py", "--sql", seed.format(clause), "--json",
                         env={**lake_env, "PYTHONPROFILEIMPORTTIME": "1"})
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads(result.stdout)["result"]["commands"][0]["rows"] == [{"n": 10}], result.stdout
        assert "served from typed column" in result.stderr, result.stderr[-3000:]
        imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
        assert "pandas" not in imported and "json" in imported, sorted(imported)[:20]
