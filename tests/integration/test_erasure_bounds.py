"""``--erase``'s rewrite (rows moved by an UPDATE keeping their first snapshot) and the catalog's column
bounds made again afterwards (:mod:`pipeline.erase.column_stats`): a bound that leaves out a value the
table holds makes DuckDB fold a filter on it into an empty result, so every value must stay inside.
Each test broke the first version of that change (an adversary's, kept)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from pipeline.ops.pipeline import Pipeline
from pipeline.settings import load_settings
from tests.helpers import assert_lake_equals_source, lake_query, run
from tests.integration.test_erasure import ERASURE_KEY, SUBJECT, _files_holding, _others, _write


@pytest.fixture
def erasure_env(lake_env):
    return {**lake_env, "SUBJECT_KEY": "details.user_id", "ERASURE_KEY": ERASURE_KEY}


def _bounds_missing(settings, table: str = "lake.main.events") -> dict[str, tuple[int, int]]:
    """Columns of ``table`` (current snapshot) where a filter on the column's own smallest or largest
    value finds fewer rows than hold it: (rows holding the value, rows the filter found). DuckDB
    folds a filter its table statistics exclude into an empty result, so a bound in the catalog that
    leaves a held value out makes queries lie."""
    columns = [name for name, kind in lake_query(settings, f"SELECT column_name, column_type FROM "
                                                           f"(DESCRIBE {table})")
               if not kind.startswith(("STRUCT", "MAP")) and not kind.endswith("]")]
    missing = {}
    for column in columns:
        quoted = '"' + column.replace('"', '""') + '"'
        # the values themselves, read without a filter (nothing for statistics to prune)
        [(low, high, held_low, held_high)] = lake_query(
            settings, f"WITH v AS (SELECT {quoted} AS c FROM {table}) SELECT min(c), max(c), "
                      f"count(*) FILTER (WHERE c = (SELECT min(c) FROM v)), "
                      f"count(*) FILTER (WHERE c = (SELECT max(c) FROM v)) FROM v")
        if low is None:
            continue
        for value, held, op in ((low, held_low, "<="), (high, held_high, ">=")):
            [(found,)] = lake_query(settings, f"SELECT count(*) FROM {table} WHERE {quoted} {op} ?", [value])
            if found < held:
                missing[f"{column} {op} {value}"] = (held, found)
    return missing


@pytest.mark.parametrize("catalog", ["postgres", "sqlite", "duckdb"])
def test_rows_a_move_leaves_inlined_stay_inside_the_bounds(catalog, erasure_env, tmp_path):
    """The newest load's file holds 12 rows, 9 of them the subject's: the erasure's UPDATE moves the 3
    others, few enough for DuckLake to keep them inlined in the catalog, and the old file goes. Made
    from the files before those rows are flushed, the bounds left the 3 newest rows' timestamps past
    the table's max, and a filter on them found nothing."""
    if catalog != "postgres":
        erasure_env = {**erasure_env, "DUCKLAKE_CATALOG": f"{catalog}:{tmp_path / ('catalog.' + catalog)}"}
    settings = load_settings(erasure_env)
    _write(settings, [(f"user-{i}", json.dumps({"user_id": f"user-{i}"})) for i in range(60)],
           ago=timedelta(hours=2))
    assert run(settings, engine="dlt").rows_inserted == 60
    late = [(SUBJECT, json.dumps({"user_id": SUBJECT}))] * 9 + \
        [(f"zz-late-{i}", json.dumps({"user_id": f"zz-late-{i}"})) for i in range(3)]
    _write(settings, late, ago=timedelta(minutes=20))
    assert run(settings, engine="dlt").rows_inserted == 12
    assert _bounds_missing(settings) == {}
    before = _others(settings)
    with Pipeline(settings) as pipeline:
        assert pipeline.erase(SUBJECT).tables["events"].rows == 9
    assert _others(settings) == before  # content and first snapshots intact
    assert _bounds_missing(settings) == {}
    recent = "SELECT count(*) FROM lake.main.events WHERE event_timestamp > now() - INTERVAL 1 HOUR"
    assert lake_query(settings, recent) == [(3,)]


def _table(env, tables: str, keys: str, **extra: str):
    return load_settings({**env, "SOURCE_TABLES": tables, "SUBJECT_KEY": keys, "ERASURE_KEY": ERASURE_KEY,
                          **extra})


def test_an_own_column_named_filename_does_not_stop_the_erasure(new_lake_env):
    """A source table with its own column named as one of DuckLake's virtual ones (known_since.VIRTUAL):
    it loads (without a known view), so the erasure must complete on it too. (``filename`` stopped it
    before its commit: the files were read with read_parquet(filename = true), which DuckDB refuses
    beside a column of that name.)"""
    env, column = new_lake_env(""), "filename"
    settings = _table(env, "public.uploads:uploaded_at:upload_id", "uploads=owner")
    from tests.helpers import source_db

    with source_db(settings) as conn:
        conn.execute(f"CREATE TABLE public.uploads (upload_id uuid PRIMARY KEY, uploaded_at timestamptz NOT NULL, "
                     f"owner text, {column} text)")
        conn.execute("INSERT INTO public.uploads SELECT gen_random_uuid(), now() - make_interval(mins => 30, "
                     "secs => i), CASE WHEN i %% 10 = 0 THEN %s ELSE 'owner-' || i END, 'mine-' || i "
                     "FROM generate_series(1, 100) i", [SUBJECT])
    assert run(settings, engine="dlt").rows_inserted == 100
    with Pipeline(settings) as pipeline:
        assert pipeline.erase(SUBJECT).tables["uploads"].rows == 10
    assert lake_query(settings, f'SELECT count(*), count(DISTINCT "{column}") FROM lake.main.uploads') == [(90, 90)]
    assert _files_holding(Path(env["DUCKLAKE_DATA_PATH"]), SUBJECT) == []
    assert _bounds_missing(settings, "lake.main.uploads") == {}
    assert_lake_equals_source(settings)


def test_a_json_column_whose_file_bounds_are_cut_short_keeps_its_values_in_bounds(erasure_env):
    """DuckLake keeps a text value's file bounds to 256 characters: a ``details`` longer than that has
    bounds that are not JSON (TRY_CAST(... AS JSON) is NULL); the table's bounds must then be unknown,
    not made from the other files alone (a filter on such a value found nothing)."""
    settings = load_settings(erasure_env)
    note = "n" * 300
    _write(settings, [(f"user-{i}", json.dumps({"user_id": f"user-{i}", "note": note})) for i in range(40)],
           ago=timedelta(hours=2))
    run(settings, engine="dlt")
    _write(settings, [(SUBJECT if i % 5 == 0 else f"user-{i}", json.dumps({"user_id": SUBJECT if i % 5 == 0
                                                                          else f"short-{i}"}))
                      for i in range(40)], ago=timedelta(hours=1))
    run(settings, engine="dlt")
    [(long_one,)] = lake_query(settings, "SELECT details::VARCHAR FROM lake.main.events "
                                         "WHERE json_extract_string(details, '$.user_id') = 'user-7'")
    equal = "SELECT count(*) FROM lake.main.events WHERE details = ?::JSON"
    assert lake_query(settings, equal, [long_one]) == [(1,)]
    with Pipeline(settings) as pipeline:
        assert pipeline.erase(SUBJECT).tables["events"].rows == 8
    assert lake_query(settings, equal, [long_one]) == [(1,)]


def test_status_and_reconcile_stay_clean_after_erasing_most_of_a_file(erasure_env):
    """The first test's case, through the pipeline's own checks: with the newest rows outside the
    bounds, --status said the lake held rows the source no longer had (failing, advising --repair)
    and --reconcile reported an hour differing, while --verify (no filter on time) said equal."""
    from tests.conftest import run_main

    settings = load_settings(erasure_env)
    _write(settings, [(f"user-{i}", json.dumps({"user_id": f"user-{i}"})) for i in range(60)],
           ago=timedelta(hours=2))
    run(settings, engine="dlt")
    late = [(SUBJECT, json.dumps({"user_id": SUBJECT}))] * 9 + \
        [(f"zz-late-{i}", json.dumps({"user_id": f"zz-late-{i}"})) for i in range(3)]
    _write(settings, late, ago=timedelta(minutes=20))
    run(settings, engine="dlt")
    assert run_main("--status", env=erasure_env).returncode == 0
    with Pipeline(settings) as pipeline:
        pipeline.erase(SUBJECT)
    assert_lake_equals_source(settings)  # holds: counts and checksums read every row
    status = run_main("--status", env=erasure_env)
    assert status.returncode == 0, status.stdout[-2000:]
    reconciled = run_main("--reconcile", "--since", "all", "--json", env=erasure_env)
    assert json.loads(reconciled.stdout)["hours_differing"] == [], reconciled.stdout

