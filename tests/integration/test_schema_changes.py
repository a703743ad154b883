"""The lake follows the source's schema changes by column identity (issue 72,
:mod:`pipeline.promote.schema_changes`): a renamed column is the same column under its new name, a
dropped one leaves the lake's current schema, each in the snapshot of the first batch that carries
it, while time travel to the snapshot before shows the old column and its values."""

from __future__ import annotations

import pytest

from pipeline.ops.pipeline import Pipeline
from pipeline.settings.resolve import resolve
from pipeline.source.connect import connect
from pipeline.source.ddl import ensure_table
from tests.conftest import load_settings
from tests.helpers import add_events, assert_lake_equals_source, lake_query, run, source_table


def _add(settings, table: str, rows: int, column: str | None, start: int) -> None:
    """``rows`` events an hour old, ``column`` (when given) holding 'n<i>'."""
    with connect(settings.source_dsn) as conn:
        extra = (f", {column}", ", 'n' || i") if column else ("", "")
        conn.execute(f"INSERT INTO {table} (event_id, event_type, event_timestamp{extra[0]}) SELECT gen_random_uuid(), "
                     f"'view', now() - interval '1 hour' + make_interval(secs => i){extra[1]} "
                     f"FROM generate_series({start}, {start + rows - 1}) i")


def _loaded_with_note(env: dict[str, str], rows: int = 20, **loads):
    """Settings of ``env``, and the source table with a ``note`` column: ``rows`` rows, loaded once
    (``loads``: how, the dlt engine by default)."""
    settings = resolve(load_settings(env))
    table = source_table(settings)
    with connect(settings.source_dsn) as conn:
        ensure_table(conn, table)
        conn.execute(f"ALTER TABLE {table} ADD COLUMN note text")
    _add(settings, table, rows, "note", 0)
    run(settings, **(loads or {"engine": "dlt"}))
    return settings, table


def _columns(settings, at: int | None = None) -> list[str]:
    version = f" AT (VERSION => {at})" if at is not None else ""
    return [name for (name,) in lake_query(settings, f"SELECT column_name FROM (DESCRIBE SELECT * FROM "
                                                     f"lake.main.events{version})")]


def _snapshot(settings) -> int:
    return lake_query(settings, "SELECT max(snapshot_id) FROM lake.snapshots()")[0][0]


@pytest.mark.parametrize("engine", ["dlt", "spark"])
def test_a_renamed_column_keeps_its_values_and_a_dropped_one_leaves_the_current_schema(lake_env, spark, engine):
    loads = {"engine": engine, "spark": spark if engine == "spark" else None}
    settings, table = _loaded_with_note(lake_env, 200, **loads)
    before_rename = _snapshot(settings)

    with connect(settings.source_dsn) as conn:
        conn.execute(f"ALTER TABLE {table} RENAME COLUMN note TO comment")
    _add(settings, table, 50, "comment", 1000)
    run(settings, **loads)
    assert_lake_equals_source(settings, expected_rows=250)  # not: 200 rows whose contents "changed"
    columns = _columns(settings)
    assert "comment" in columns and "note" not in columns, columns
    assert lake_query(settings, "SELECT count(*) FROM lake.main.events WHERE comment LIKE 'n%'") == [(250,)]
    # time travel: the snapshot before the rename has the old name and its values
    assert "note" in _columns(settings, before_rename) and "comment" not in _columns(settings, before_rename)
    assert lake_query(settings, f"SELECT count(note) FROM lake.main.events AT (VERSION => {before_rename})") == [(200,)]
    before_drop = _snapshot(settings)

    with connect(settings.source_dsn) as conn:
        conn.execute(f"ALTER TABLE {table} DROP COLUMN comment")
    _add(settings, table, 30, None, 2000)
    run(settings, **loads)
    assert_lake_equals_source(settings, expected_rows=280)
    assert "comment" not in _columns(settings)
    assert lake_query(settings, f"SELECT count(comment) FROM lake.main.events AT (VERSION => {before_drop})"
                      ) == [(250,)]
    with Pipeline(settings, engine="dlt") as pipeline:
        changes = pipeline.status().as_dict()["schema_changes"]
    assert [(c["change"], c["column"], c["from"], c["to"]) for c in changes] == [
        ("renamed", "comment", "note", "comment"), ("dropped", "comment", None, None)], changes
    assert [c["snapshot"] for c in changes] == [before_drop, _snapshot(settings)], changes
    from pipeline.ops.metrics import families
    from pipeline.ops.observe import Observer

    counted = {tuple(s.labels.values()): s.value for f in families(Observer(settings, ttl=0).observe())
               for s in f.samples if s.name == "event_lake_schema_changes_total"}
    assert counted == {("events", "dropped"): 1, ("events", "renamed"): 1}, counted


def test_a_table_dropped_and_made_again_is_said_and_its_columns_taken_by_name(lake_env, caplog):
    """Another oid: the old table's column numbers mean nothing in the new one (a column numbered as
    a renamed one is not a rename)."""
    settings, table = _loaded_with_note(lake_env)
    with connect(settings.source_dsn) as conn:  # a migration tool's drop and create: same rows, other names
        conn.execute(f"CREATE TABLE {table}_copy AS SELECT * FROM {table}")
        conn.execute(f"DROP TABLE {table}")
        ensure_table(conn, table)
        conn.execute(f"ALTER TABLE {table} ADD COLUMN remark text")
        conn.execute(f"INSERT INTO {table} (event_id, event_type, event_timestamp, details, created_at, remark) "
                     f"SELECT event_id, event_type, event_timestamp, details, created_at, note FROM {table}_copy")
        conn.execute(f"DROP TABLE {table}_copy")
    _add(settings, table, 5, "remark", 100)
    with caplog.at_level("INFO", logger="pipeline.promote.schema_changes"):
        run(settings, engine="dlt")
    assert any("dropped and made again" in r.getMessage() for r in caplog.records), caplog.text
    columns = _columns(settings)
    assert "note" in columns and "remark" in columns, columns  # not renamed: the old one kept by name
    assert lake_query(settings, "SELECT change FROM lake.ops.schema_changes") == [("recreated",)]


def test_a_column_renamed_while_a_first_load_reads_its_parts_is_one_column(lake_env, monkeypatch):
    """The rename comes as the first part commits (the next part's snapshot taken ahead holds the
    table's lock: it gives way): the parts before it load the old name, those after the new one, and
    the lake ends with one column holding every row's value, the old name in the first snapshots."""
    import threading

    import psycopg

    from pipeline.load import run as load_run

    settings = resolve(load_settings({**lake_env, "BACKFILL_BATCH_ROWS": "1000", "LOOKBACK": "15m"}))
    table = source_table(settings)
    with connect(settings.source_dsn) as conn:
        ensure_table(conn, table)
        conn.execute(f"ALTER TABLE {table} ADD COLUMN note text")
        conn.execute(f"INSERT INTO {table} (event_id, event_type, event_timestamp, note) SELECT gen_random_uuid(), "
                     "'view', now() - interval '1 hour' - make_interval(mins => i), 'n' || i "
                     "FROM generate_series(1, 3000) i")
    real_promote, renames = load_run.promote_staged_group, []

    def rename() -> None:
        with psycopg.connect(settings.source_dsn.conninfo(), autocommit=True) as conn:
            conn.execute("SET statement_timeout = '60s'")  # the test's bound: a stall fails it
            conn.execute(f"ALTER TABLE {table} RENAME COLUMN note TO comment")

    def promote_then_rename(*args, **kwargs):
        result = real_promote(*args, **kwargs)
        if not renames:
            renames.append(threading.Thread(target=rename))
            renames[0].start()
        return result

    monkeypatch.setattr(load_run, "promote_staged_group", promote_then_rename)
    report = run(settings, engine="dlt")
    renames[0].join()
    assert len(report.parts) >= 2, report.parts  # read in parts, one of them planned again after the rename
    assert_lake_equals_source(settings, expected_rows=3000)
    assert "note" not in _columns(settings)
    assert lake_query(settings, "SELECT count(comment) FROM lake.main.events") == [(3000,)]
    first = lake_query(settings, "SELECT min(snapshot_id) FROM lake.snapshots() WHERE snapshot_id > 1")[0][0]
    assert "note" in _columns(settings, first)


def test_two_columns_whose_names_the_source_swapped_keep_their_values(lake_env):
    """``a`` and ``b`` swap names (through a third): each lake column follows its source column, not
    its old name, and the lake still equals the source by content."""
    settings = resolve(load_settings(lake_env))
    table = source_table(settings)
    with connect(settings.source_dsn) as conn:
        ensure_table(conn, table)
        conn.execute(f"ALTER TABLE {table} ADD COLUMN a text, ADD COLUMN b int")
    insert = (f"INSERT INTO {table} (event_id, event_type, event_timestamp, {{}}, {{}}) SELECT gen_random_uuid(), "
              "'view', now() - interval '1 hour' + make_interval(secs => i), 'n' || i, i FROM generate_series({}, {}) i")
    with connect(settings.source_dsn) as conn:
        conn.execute(insert.format("a", "b", 0, 39))
        run(settings, engine="dlt")
        for step in ("a TO swap", "b TO a", "swap TO b"):
            conn.execute(f"ALTER TABLE {table} RENAME COLUMN {step}")
        conn.execute(insert.format("b", "a", 100, 109))
    report = run(settings, engine="dlt")
    assert report.rows_inserted == 10, report.summary()
    assert_lake_equals_source(settings, expected_rows=50)
    assert lake_query(settings, "SELECT count(*) FROM lake.main.events WHERE b LIKE 'n%'") == [(50,)]


@pytest.mark.parametrize("ddl", ["RENAME COLUMN note TO comment", "DROP COLUMN note", "ADD COLUMN extra int",
                                 "ALTER COLUMN note TYPE varchar(20)"])
def test_a_frozen_table_refuses_each_change_by_name_and_loses_nothing(lake_env, ddl):
    """SCHEMA_CHANGES=freeze, said by the table itself in SOURCE_TABLES: the load after the change stops
    before reading, naming it; with evolve the next load then takes every row written meanwhile."""
    from pipeline.promote.schema_changes import SchemaFrozen

    env = {**lake_env, "SOURCE_TABLES": "public.events(schema_changes=freeze)"}
    settings, table = _loaded_with_note(env)
    with connect(settings.source_dsn) as conn:
        conn.execute(f"ALTER TABLE {table} {ddl}")
    _add(settings, table, 5, None, 100)
    with pytest.raises(SchemaFrozen) as refused:
        run(settings, engine="dlt")
    named = {"RENAME": "note renamed to comment", "DROP": "note dropped", "ADD": "extra added",
             "ALTER": "note retyped text -> varchar"}[ddl.split()[0]]
    assert named in str(refused.value), refused.value
    assert lake_query(settings, "SELECT count(*) FROM lake.main.events") == [(20,)]  # nothing read
    evolving = resolve(load_settings({**env, "SOURCE_TABLES": "public.events(schema_changes=evolve)"}))
    run(evolving, engine="dlt")
    assert_lake_equals_source(evolving, expected_rows=25)


def test_the_older_schema_drift_ignore_is_discard_value():
    from pipeline.settings import SchemaChanges

    assert load_settings({"SCHEMA_DRIFT": "ignore"}).schema_changes is SchemaChanges.DISCARD_VALUE
    assert load_settings({"SCHEMA_DRIFT": "add"}).schema_changes is SchemaChanges.EVOLVE
    assert load_settings({"SCHEMA_CHANGES": "freeze", "SCHEMA_DRIFT": "ignore"}).schema_changes is SchemaChanges.FREEZE


def test_a_table_rewritten_between_loads_is_not_read_again_as_new_arrivals(lake_env):
    """``ALTER … TYPE`` rewrites the table and gives every row a new xmin: the next load reads the
    rows that arrived since, not the ones that arrived within a minute of the last load (all of a
    table written just before it)."""
    settings = resolve(load_settings(lake_env))
    table = source_table(settings)
    with connect(settings.source_dsn) as conn:
        ensure_table(conn, table)
    _add(settings, table, 300, None, 0)  # arrived just now: within a minute of the load's mark
    run(settings, engine="dlt")
    with connect(settings.source_dsn) as conn:
        conn.execute(f"ALTER TABLE {table} ALTER COLUMN event_type TYPE varchar(100) USING event_type || ''")
    add_events(settings, 10, seed=1)
    report = run(settings, engine="dlt")
    assert report.rows_inserted == 10 and report.tables["events"].rows_read == 10, report.summary()
    assert_lake_equals_source(settings, expected_rows=310)


@pytest.mark.parametrize("ddl", ["RENAME COLUMN details TO payload", "DROP COLUMN event_type"])
def test_an_event_column_renamed_or_dropped_is_refused_by_name(lake_env, ddl):
    """``details`` (typed keys, views by event type) and the other event columns are read by name: a
    rename is not followed (it would load NULL details and a new column beside), it is refused."""
    from pipeline.errors import TerminalError

    settings = resolve(load_settings(lake_env))
    table = source_table(settings)
    with connect(settings.source_dsn) as conn:
        ensure_table(conn, table)
    _add(settings, table, 20, None, 0)
    run(settings, engine="dlt")
    with connect(settings.source_dsn) as conn:
        conn.execute(f"ALTER TABLE {table} {ddl}")
    with pytest.raises(TerminalError) as refused:
        run(settings, engine="dlt")
    column = ddl.split()[2]
    assert f"{table}.{column} was {'renamed to payload' if 'RENAME' in ddl else 'dropped'}" in str(refused.value)
    assert lake_query(settings, "SELECT count(*) FROM lake.main.events") == [(20,)]


def test_a_history_part_that_gave_way_mid_read_is_read_again_and_the_history_goes_on(lake_env, monkeypatch):
    """An ALTER comes while the second part is read: that part gives way, is planned again, and every
    part after it is still read in the same load (planned again with the same bound, it read as no
    progress and the load stopped its history there, a third of the rows not loaded)."""
    import threading
    import time

    import psycopg

    from pipeline.load import run as load_run

    settings = resolve(load_settings({**lake_env, "BACKFILL_BATCH_ROWS": "1000", "LOOKBACK": "15m"}))
    table = source_table(settings)
    with connect(settings.source_dsn) as conn:
        ensure_table(conn, table)
        conn.execute(f"INSERT INTO {table} (event_id, event_type, event_timestamp) SELECT gen_random_uuid(), "
                     "'view', now() - interval '1 hour' - make_interval(mins => i) FROM generate_series(1, 3000) i")
    real_extract, calls, altered = load_run.extract, [], threading.Event()

    def alter() -> None:
        with psycopg.connect(settings.source_dsn.conninfo(), autocommit=True) as conn:
            conn.execute("SET statement_timeout = '60s'")
            conn.execute(f"ALTER TABLE {table} ADD COLUMN extra int")
        altered.set()

    def extract_then_alter(*args, **kwargs):
        staged = real_extract(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:  # the second part is read, its snapshot still gives way: the ALTER comes
            threading.Thread(target=alter).start()
            deadline = time.monotonic() + 60
            while not altered.is_set() and time.monotonic() < deadline:
                time.sleep(0.05)
        return staged

    monkeypatch.setattr(load_run, "extract", extract_then_alter)
    report = run(settings, engine="dlt")
    assert altered.is_set()
    assert len(calls) >= 4, calls  # the second part read twice
    assert report.rows_inserted == 3000, report.summary()
    assert_lake_equals_source(settings, expected_rows=3000)


def test_discard_value_keeps_loading_a_renamed_column(lake_env):
    """discard_value leaves added columns out, not renamed ones: the lake renames the column, and the
    batch carrying the rename fills it (it was loaded NULL there, for good; found by the adversary)."""
    settings, table = _loaded_with_note(lake_env)
    discarding = resolve(load_settings({**lake_env, "SCHEMA_CHANGES": "discard_value"}))
    with connect(settings.source_dsn) as conn:
        conn.execute(f"ALTER TABLE {table} RENAME COLUMN note TO a")
        conn.execute(f"ALTER TABLE {table} ADD COLUMN extra int")
    _add(discarding, table, 5, "a", 100)
    run(discarding, engine="dlt")
    columns = _columns(discarding)
    assert "a" in columns and "extra" not in columns, columns
    assert lake_query(discarding, "SELECT count(a) FROM lake.main.events") == [(25,)]
