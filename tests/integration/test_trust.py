"""Trust boundaries of ad-hoc SQL: a read-only session reads the lake and nothing else; a
--write session changes the lake but no file outside its data path."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pytest

from pipeline.settings import load_settings
from pipeline.settings.resolve import resolve
from pipeline.sql_session.query import open_session
from tests.conftest import ROOT
from tests.helpers import add_events, assert_lake_equals_source, lake_query, run


def load(env: dict[str, str]) -> dict:
    """300 events in one load; the env, its settings and one of the lake's data files."""
    from pipeline.settings import load_settings

    settings = load_settings(env)
    add_events(settings, 300, seed=1)
    run(settings, engine="dlt")
    [[path]] = lake_query(settings, "SELECT data_file FROM ducklake_list_files('lake', 'events') LIMIT 1")
    return {"env": env, "settings": settings, "file": Path(path)}


@pytest.fixture(scope="module")
def loaded(shared_lake_env) -> dict:
    """:func:`load` once for the module's tests that may not change the lake — and assert so."""
    return load(shared_lake_env("trust"))


@pytest.fixture
def own_loaded(lake_env) -> dict:
    """:func:`load` for a test that changes the lake."""
    return load(lake_env)


@pytest.fixture
def out_dir(tmp_path) -> Path:
    """An empty folder outside the lake's (the lake fixtures use ``tmp_path`` itself)."""
    made = tmp_path / "outside"
    made.mkdir()
    return made


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sql_error(cli, env, *args: str) -> dict:
    result = cli("--json", *args, env=env)
    assert result.returncode == 1, result.stdout
    out = json.loads(result.stdout)
    assert out["status"] == "error"
    return out


def test_read_only_session_cannot_write_a_lake_file_nor_half_run(loaded, cli, out_dir):
    env, lake_file = loaded["env"], loaded["file"]
    before = digest(lake_file)
    outside = out_dir / "written.parquet"
    out = sql_error(cli, env, "--sql", f"SELECT 1; COPY (SELECT 1 AS x) TO '{outside}' (FORMAT parquet)",
                    "--sql", f"COPY (SELECT 1 AS x) TO '{lake_file}' (FORMAT parquet)")
    assert out["error"]["command_index"] == 1
    assert "COPY (SELECT 1 AS x) TO" in out["error"]["message"]
    assert "read-only; use --write" in out["error"]["message"]
    assert out["result"]["command_count"] == 0  # judged before anything ran: not even SELECT 1
    assert not outside.exists() and digest(lake_file) == before
    assert_lake_equals_source(loaded["settings"], 300)


@pytest.mark.parametrize("statement", [
    "ATTACH '' AS pg (TYPE postgres, SECRET lake_catalog)",
    "ATTACH '{tmp}/x.duckdb' AS x",
    "LOAD httpfs",
    "INSTALL httpfs",
    "CREATE TABLE events_copy AS SELECT * FROM events",
    "EXPORT DATABASE '{tmp}/export'",
    "DETACH lake",
])
def test_read_only_session_refuses_statements_that_write_by_name(loaded, cli, out_dir, statement):
    statement = statement.format(tmp=out_dir)
    out = sql_error(cli, loaded["env"], "--sql", statement)
    assert out["error"]["message"].startswith(statement.split()[0])
    assert "read-only; use --write" in out["error"]["message"]
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize("query", [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('{home}/../../../etc/hostname')",
    "SELECT * FROM postgres_scan('{catalog}', 'public', 'pg_class')",
    "SELECT * FROM postgres_query('__ducklake_metadata_lake', 'CREATE TABLE public.x (i int)')",
])
def test_read_only_session_reaches_no_file_or_database_beyond_the_lake(loaded, cli, query):
    env = loaded["env"]
    out = sql_error(cli, env, "--sql", query.format(home=env["EVENT_LAKE_HOME"],
                                                    catalog=env["DUCKLAKE_CATALOG"]))
    assert out["error"]["command_index"] == 0
    assert "password" not in out["error"]["message"].lower()


def test_read_only_session_cannot_unlock_itself(loaded, cli):
    for statement in ("SET enable_external_access = true", "RESET enable_external_access",
                      "SET allowed_directories = ['/']"):
        out = sql_error(cli, loaded["env"], "--sql", statement, "--sql", "SELECT * FROM read_csv('/etc/passwd')")
        assert out["error"]["command_index"] == 0 and "settings are fixed" in out["error"]["message"]
        # and below the statement judge, DuckDB's own lock holds on its own
        with open_session(resolve(load_settings(loaded["env"]))) as con, \
                pytest.raises(duckdb.Error, match="locked"):
            con.execute(statement)
    # the catalog secret is gone once the lake is attached: nothing can reuse it
    result = cli("--json", "--sql", "SELECT count(*) AS n FROM duckdb_secrets() WHERE type = 'postgres'",
                 env=loaded["env"])
    assert json.loads(result.stdout)["result"]["commands"][0]["rows"] == [{"n": 0}]


def test_read_only_session_still_reads_everything_in_the_lake(loaded, cli):
    env = loaded["env"]
    result = cli("--json", "--sql", "SELECT count(*) AS n FROM events",
                 "--sql", "SELECT count(*) AS n FROM events AT (VERSION => 1)",
                 "--sql", "SELECT count(*) AS n FROM snapshots()",
                 "--sql", "SELECT count(*) AS n FROM ops.batches",
                 "--sql", "SELECT count(*) AS n FROM events WHERE details->>'$.user_id' IS NOT NULL",
                 "--sql-file", "lake_health", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    counts = [c["rows"][0].get("n") for c in json.loads(result.stdout)["result"]["commands"][:5]]
    assert counts[0] == 300 and counts[2] >= 2 and counts[3] == 1


def test_write_session_changes_the_lake_but_no_file_outside_it(own_loaded, cli, out_dir):
    env = own_loaded["env"]
    made = cli("--json", "--write", "--sql", "CREATE TABLE notes AS SELECT 1 AS id",
               "--sql", "INSERT INTO notes VALUES (2)", env=env)
    assert made.returncode == 0, made.stdout + made.stderr
    for statement in (f"COPY notes TO '{out_dir}/notes.csv'", f"ATTACH '{out_dir}/x.duckdb' AS x",
                      "SELECT * FROM read_csv('/etc/passwd')"):
        out = sql_error(cli, env, "--write", "--sql", statement)
        assert "nothing outside its data path" in out["error"]["message"]
    assert list(out_dir.iterdir()) == []


def test_sql_file_looks_up_a_named_query_only_by_a_bare_name(loaded, cli, out_dir):
    env = loaded["env"]
    missing = cli("--sql-file", "../../x/lake_health", env=env)
    assert missing.returncode == 1 and "../../x/lake_health does not exist" in missing.stderr
    missing_sql = cli("--sql-file", "lake_health.sql", env=env)
    assert missing_sql.returncode == 1 and "does not exist" in missing_sql.stderr
    own = out_dir / "mine.sql"
    own.write_text("SELECT 41 + 1 AS answer")
    result = cli("--json", "--sql-file", str(own), env=env)
    assert json.loads(result.stdout)["result"]["commands"][0]["rows"] == [{"answer": 42}]
    named = cli("--json", "--sql-file", "lake_health", env=env)
    assert named.returncode == 0, named.stderr
    assert (ROOT / "sql" / "analysis" / "lake_health.sql").exists()


def test_a_dropped_lake_table_stops_the_run_and_names_the_way_back(own_loaded, cli):
    env, settings = own_loaded["env"], own_loaded["settings"]
    assert cli("--write", "--sql", "DROP TABLE events", env=env).returncode == 0
    refused = cli("--run", "--engine", "dlt", env=env)
    assert refused.returncode == 1
    assert "lake.main.events is missing" in refused.stderr and "--reconcile --since all" in refused.stderr
    assert lake_query(settings, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'events'") == [(0,)]
    # the way back the message gives first: time travel to the last snapshot that had the table
    restore = refused.stderr.split('--write --sql "')[1].split('"')[0]
    assert cli("--write", "--sql", restore, env=env).returncode == 0
    assert cli("--run", "--engine", "dlt", env=env).returncode == 0
    assert_lake_equals_source(settings, 300)
    # and the other: reload the whole history from the source
    assert cli("--write", "--sql", "DROP TABLE events", env=env).returncode == 0
    reloaded = cli("--reconcile", "--since", "all", env=env)
    assert reloaded.returncode == 0, reloaded.stdout + reloaded.stderr
    assert_lake_equals_source(settings, 300)


def test_reconcile_since_all_reaches_a_row_dated_in_year_one(own_loaded, cli):
    import psycopg

    from pipeline.settings.resolve import resolve

    env, settings = own_loaded["env"], own_loaded["settings"]
    with psycopg.connect(resolve(settings).source_dsn.conninfo(), autocommit=True) as conn:
        conn.execute("INSERT INTO events (event_id, event_type, event_timestamp, details, created_at) VALUES "
                     "(gen_random_uuid(), 'api_request', '0001-01-01 00:00:00+00', '{}', now())")
    assert cli("--reconcile", env=env).returncode == 0  # the default 7d cannot see it
    assert not loaded_equal(settings)
    result = cli("--reconcile", "--since", "all", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert_lake_equals_source(settings, 301)


def loaded_equal(settings) -> bool:
    from pipeline.load import verify
    from pipeline.settings.resolve import resolve

    return verify.compare(resolve(settings)).equal


def test_job_history_leaves_the_snapshot_list_alone(own_loaded, cli):
    """Runs that load nothing, reconciles and maintenance dry runs are recorded in the job
    history (in the catalog database) without committing a lake snapshot: a rerun leaves the
    snapshot list untouched, as the README promises."""
    env, settings = own_loaded["env"], own_loaded["settings"]
    before = lake_query(settings, "SELECT count(*) FROM lake.snapshots()")
    for args in (("--run", "--engine", "dlt"), ("--run", "--engine", "dlt"), ("--extract-only", "--engine", "dlt"),
                 ("--reconcile",), ("--maintain", "--dry-run")):
        assert cli(*args, env=env).returncode == 0, args
    assert lake_query(settings, "SELECT count(*) FROM lake.snapshots()") == before
    status = json.loads(cli("--status", "--json", env=env).stdout)
    assert status["jobs"]["load"]["status"] == "success" and status["jobs"]["reconcile"]["status"] == "success"
    recorded = [job for (job,) in lake_query(
        settings, "SELECT job FROM __ducklake_metadata_lake.lake.event_lake_jobs ORDER BY finished_at")]
    assert recorded.count("load") == 2 and recorded[-1] == "reconcile"


def test_a_lake_with_history_in_ops_jobs_keeps_it(settings, lake_env, cli):
    """Lakes made before the move: their ops.jobs rows are copied to the catalog's table."""
    from pipeline.lake import connect as lake
    from pipeline.settings.resolve import resolve

    add_events(settings, 40, seed=2)
    run(settings, engine="dlt")
    con = lake.connect(resolve(settings))
    try:
        con.execute("CREATE TABLE lake.ops.jobs (run_id VARCHAR, job VARCHAR, started_at TIMESTAMPTZ, "
                    "finished_at TIMESTAMPTZ, status VARCHAR, error VARCHAR, details JSON, host VARCHAR)")
        con.execute("INSERT INTO lake.ops.jobs VALUES ('r0', 'compact', now() - INTERVAL 2 DAY, "
                    "now() - INTERVAL 2 DAY, 'success', NULL, '{}', 'old-host:1')")
    finally:
        con.close()
    assert cli("--run", "--engine", "dlt", env=lake_env).returncode == 0  # records a load: migrates
    status = json.loads(cli("--status", "--json", env=lake_env).stdout)
    assert set(status["jobs"]) == {"compact", "load"}


def test_a_local_spark_session_listens_on_loopback_only(spark):
    import psutil

    jvms = [p for p in psutil.Process().children(recursive=True) if "java" in p.name()]
    assert jvms, "the local Spark session's JVM is a child of this process"
    listening = {c.laddr.ip for jvm in jvms for c in jvm.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN}
    assert listening and listening <= {"127.0.0.1", "::ffff:127.0.0.1", "::1"}, listening


def test_the_local_driver_jvm_compiles_with_c1_only(spark):
    """The driver schedules slices and moves no rows: C2's compile time never pays back
    (spark_session.DRIVER_JIT); asked of the running JVM, not of the options it was given."""
    jvm = spark.sparkContext._jvm
    diagnostics = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    assert diagnostics.getVMOption("TieredStopAtLevel").getValue() == "1"


def test_a_second_session_in_a_process_neither_records_nor_locks_the_class_archive(spark, tmp_path):
    """getOrCreate returns the running session, started with its own options: a second
    build_session in the process (an in-process command, a notebook) must not take the archive's
    recording lock nor wait at exit for a recording its JVM was never asked to write."""
    from pipeline.extract.spark_session import build_session
    from pipeline.settings import load_settings

    folder = tmp_path / "jvm"
    settings = load_settings({"EVENT_LAKE_HOME": str(tmp_path), "SPARK_CLASS_ARCHIVE": str(folder)})
    again = build_session(settings)
    assert again.sparkContext is spark.sparkContext
    assert not folder.exists()  # no recording lock taken, so no wait at exit either


def test_help_and_hints_name_the_command_the_user_has(loaded, cli, capsys):
    import sys

    from pipeline.cli.main import main

    result = cli("--at-time", "2001-01-01 00:00:00+00", "--sql", "SELECT 1", env=loaded["env"])
    assert result.returncode == 1 and "no snapshot at time 2001-01-01" in result.stderr
    error = result.stderr[result.stderr.index("error:"):]  # the lines the failure itself prints
    assert "catalog" not in error.split("hint")[0].lower()
    with pytest.raises(SystemExit) as exited:
        main(["stauts"])
    assert exited.value.code == 2 and "did you mean 'status'?" in capsys.readouterr().err
    argv = sys.argv
    try:
        sys.argv = ["/home/u/.local/bin/event-lake", "--help"]
        with pytest.raises(SystemExit):
            main(["--help"])
    finally:
        sys.argv = argv
    shown = capsys.readouterr().out
    assert shown.startswith("usage: event-lake") and "status, print-attach" in " ".join(shown.split())


# what a read-only session was shown to do through DuckLake's own catalog connection and through
# statements that wrap a writer; each is refused before anything runs, judged on DuckDB's parse tree
BACK_DOORS = {
    "catalog write": "CALL postgres_execute('__ducklake_metadata_lake', 'COMMIT; DELETE FROM lake.ducklake_data_file')",
    "catalog read": "SELECT * FROM postgres_query('__ducklake_metadata_lake', 'SELECT rolpassword FROM pg_authid')",
    "program": "SELECT * FROM postgres_execute('__ducklake_metadata_lake', 'COPY (SELECT 1) TO PROGRAM ''id''')",
    "metadata table": "SELECT * FROM __ducklake_metadata_lake.lake.ducklake_data_file",
    "explain analyze copy": "EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{file}' (FORMAT parquet)",
    "prepared copy": "PREPARE p AS COPY (SELECT 1 AS x) TO '{file}' (FORMAT parquet)",
    "execute": "EXECUTE p",
    "cleanup": "CALL ducklake_cleanup_old_files('lake', cleanup_all => true)",
    "merge": "CALL ducklake_merge_adjacent_files('lake')",
    "flush": "CALL ducklake_flush_inlined_data('lake')",
    "checkpoint": "CHECKPOINT",
    "other database": "SELECT * FROM postgres_scan('dbname=postgres host=127.0.0.1 user=postgres', 'pg_catalog', 'pg_authid')",
    "attach by function": "SELECT * FROM postgres_attach('dbname=postgres host=127.0.0.1 user=postgres')",
    "dynamic sql": "SELECT * FROM query('SELECT * FROM postgres_query(''__ducklake_metadata_lake'', ''SELECT 1'')')",
    "variable": "SET VARIABLE x = (SELECT count(*) FROM postgres_query('__ducklake_metadata_lake', 'SELECT 1'))",
    "environment": "SELECT getenv('SOURCE_PG_DSN')",
    "inside a subquery": "SELECT (SELECT count(*) FROM postgres_execute('__ducklake_metadata_lake', 'SELECT 1')) AS n",
    # then an unqualified SELECT … FROM pg_authid returned a role's SCRAM hash
    "use the catalog server": "USE __ducklake_metadata_lake.pg_catalog",
    "use the catalog database": "USE __ducklake_metadata_lake",
    "use it quoted": 'USE "__ducklake_metadata_lake"."lake"',
    "use DuckDB's own": "USE system.main",
}


@pytest.mark.parametrize("door", list(BACK_DOORS))
def test_read_only_session_has_no_back_door(loaded, door):
    from pipeline.sql_session.query import run_session

    settings = resolve(loaded["settings"])
    before = digest(loaded["file"])
    statement = BACK_DOORS[door].format(file=loaded["file"])
    with open_session(settings) as con:
        result = run_session(con, ["SELECT count(*) FROM events", statement], {}, None)
    assert result.commands == []  # refused before the first statement ran
    assert result.error["command_index"] == 1
    assert "is not allowed: this session is read-only" in result.error["message"]
    assert digest(loaded["file"]) == before
    assert_lake_equals_source(loaded["settings"], expected_rows=300)


def test_read_only_session_runs_reads_of_every_kind(loaded):
    from pipeline.sql_session.query import run_session

    reads = ["SELECT count(*) FROM events", "FROM events LIMIT 1", "DESCRIBE events", "SHOW TABLES",
             "SUMMARIZE SELECT event_type FROM events", "PRAGMA table_info('events')",
             "CALL pragma_version()", "EXPLAIN SELECT 1", "EXPLAIN ANALYZE SELECT count(*) FROM events",
             "SET VARIABLE v = 3", "SELECT getvariable('v') * 2",
             "SELECT * FROM snapshots()", "SELECT * FROM ducklake_table_info('lake')",
             "SELECT * FROM table_changes('events', 0, 1) LIMIT 1", "BEGIN", "SELECT 1", "COMMIT",
             "SELECT event_type, row_number() OVER (ORDER BY event_type) FROM events LIMIT 2",
             "WITH t AS (SELECT * FROM range(3)) SELECT list(range) FROM t",
             "USE ops", "SELECT count(*) FROM batches", "USE lake.main", "USE lake", "SELECT count(*) FROM events"]
    with open_session(resolve(loaded["settings"])) as con:
        result = run_session(con, reads, {}, None)
    assert result.error is None, result.error
    assert len(result.commands) == len(reads)


# what DuckLake's own catalog connection could do, sent straight to DuckDB (the statement judge
# is not asked): the first layer alone — the role the session reaches the catalog as — stops each
CATALOG_DOORS = {
    "delete the file list": "CALL postgres_execute('__ducklake_metadata_lake', "
                            "'COMMIT; DELETE FROM lake.ducklake_data_file')",
    "leave read-only mode": "CALL postgres_execute('__ducklake_metadata_lake', 'COMMIT; SET "
                            "default_transaction_read_only = off; DELETE FROM lake.ducklake_snapshot')",
    "run a program": "CALL postgres_execute('__ducklake_metadata_lake', 'COPY (SELECT 1) TO PROGRAM ''id''')",
    "read a server file": "SELECT * FROM postgres_query('__ducklake_metadata_lake', "
                          "'SELECT pg_read_file(''/etc/hostname'')')",
    "read passwords": "SELECT * FROM postgres_query('__ducklake_metadata_lake', 'SELECT rolpassword FROM pg_authid')",
    "hold the promotion lock": "SELECT * FROM postgres_query('__ducklake_metadata_lake', "
                               "'SELECT pg_advisory_lock(1)')",
    "make a table": "CALL postgres_execute('__ducklake_metadata_lake', 'COMMIT; SET "
                    "default_transaction_read_only = off; CREATE TABLE lake.x (a int)')",
}
REFUSED_BY_POSTGRES = "permission denied|read-only transaction|must be superuser|pg_execute_server_program"


def _drop_reader(server, catalog_db: str, role: str) -> None:
    import psycopg

    from pipeline.sql_session.catalog_reader import _LOCK_FUNCTIONS

    with psycopg.connect(server.with_dbname(catalog_db).conninfo(), autocommit=True) as conn:
        conn.execute(f"GRANT EXECUTE ON FUNCTION {', '.join(_LOCK_FUNCTIONS)} TO PUBLIC")
        conn.execute(f'DROP OWNED BY "{role}"')
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        conn.execute(f'DROP ROLE IF EXISTS "{role}"')


@pytest.fixture(scope="module")
def read_as_reader(loaded, databases):
    """The shared lake, its catalog read in read-only sessions by a reader role made with the
    GRANTs ``doctor`` prints (DUCKLAKE_CATALOG_READER)."""
    import psycopg

    from pipeline.sql_session.catalog_reader import grants

    catalog = resolve(loaded["settings"]).catalog.pg
    role = f"{catalog.dbname}_reader"
    with psycopg.connect(catalog.conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        for statement in grants(reader=role, writer=catalog.user, database=catalog.dbname, schema="lake"):
            conn.execute(statement)
    env = {**loaded["env"], "DUCKLAKE_CATALOG_READER": f"postgresql://{role}@{catalog.host}:{catalog.port}/"
                                                       f"{catalog.dbname}"}
    try:
        yield {**loaded, "env": env, "settings": load_settings(env)}
    finally:
        _drop_reader(databases.server, catalog.dbname, role)


@pytest.mark.parametrize("door", list(CATALOG_DOORS))
def test_the_catalog_reader_alone_stops_what_the_catalog_connection_could_do(read_as_reader, door):
    settings = resolve(read_as_reader["settings"])
    with open_session(settings) as con:
        [[who]] = con.execute("SELECT * FROM postgres_query('__ducklake_metadata_lake', "
                              "'SELECT current_user')").fetchall()
        assert who == settings.catalog.reader.user
        with pytest.raises(duckdb.Error, match=REFUSED_BY_POSTGRES):
            con.execute(CATALOG_DOORS[door])  # straight to DuckDB: the statement judge is not asked
    assert_lake_equals_source(read_as_reader["settings"], expected_rows=300)


def test_the_catalog_reader_reads_everything_a_session_reads(read_as_reader, cli):
    result = cli("--json", "--sql", "SELECT count(*) AS n FROM events", "--sql",
                 "SELECT count(*) AS n FROM ops.batches", "--sql", "SELECT count(*) AS n FROM snapshots()",
                 env=read_as_reader["env"])
    assert result.returncode == 0, result.stdout + result.stderr
    counts = [c["rows"][0]["n"] for c in json.loads(result.stdout)["result"]["commands"]]
    assert counts[0] == 300 and counts[1] >= 1 and counts[2] >= 1
    assert "can write it" not in result.stderr  # no fallback warning when a reader is set


def test_without_a_reader_sql_says_what_it_falls_back_to_and_doctor_gives_the_grants(loaded, cli):
    result = cli("--sql", "SELECT 1", env=loaded["env"])
    assert result.returncode == 0, result.stderr
    assert "reaches the catalog as postgres, a role that can write it" in result.stderr
    assert "DUCKLAKE_CATALOG_READER" in result.stderr
    from pipeline.ops.doctor import WARN, Doctor

    check = Doctor(resolve(loaded["settings"])).reader()
    assert check.status == WARN and "GRANT SELECT ON ALL TABLES IN SCHEMA \"lake\"" in check.hint


def test_doctor_fails_a_reader_that_can_write(loaded, cli):
    """A DUCKLAKE_CATALOG_READER that names a role with more than reads is caught, not trusted."""
    from pipeline.ops.doctor import FAIL, Doctor

    settings = resolve(loaded["settings"])
    catalog = settings.catalog.pg
    import psycopg

    role = f"{catalog.dbname}_writer"
    with psycopg.connect(catalog.conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN SUPERUSER')
    try:
        url = f"postgresql://{role}@{catalog.host}:{catalog.port}/{catalog.dbname}"
        check = Doctor(resolve(load_settings({**loaded["env"], "DUCKLAKE_CATALOG_READER": url}))).reader()
        assert check.status == FAIL and "is a superuser" in check.detail
        assert "can change the lake's metadata tables" in check.detail
    finally:
        with psycopg.connect(catalog.conninfo(), autocommit=True) as conn:
            conn.execute(f'DROP ROLE "{role}"')


def test_the_embedded_default_reads_its_catalog_as_its_own_reader(lake_env, databases):
    """The embedded default makes its reader itself; shown on a server this test owns the
    catalog of, through the same code path (CatalogSpec.embedded_default)."""
    from pipeline.settings.catalog import EMBEDDED_READER, CatalogSpec
    from pipeline.settings.resolve import ResolvedSettings

    settings = load_settings(lake_env)
    add_events(settings, 50, seed=4)
    run(settings, engine="dlt")
    resolved = resolve(settings)
    embedded = ResolvedSettings.of(resolved, catalog=CatalogSpec.embedded_default(resolved.catalog.pg))
    try:
        with open_session(embedded) as con:
            [[who]] = con.execute("SELECT * FROM postgres_query('__ducklake_metadata_lake', "
                                  "'SELECT current_user')").fetchall()
            assert who == EMBEDDED_READER
            assert con.execute("SELECT count(*) FROM events").fetchone()[0] == 50
            with pytest.raises(duckdb.Error, match=REFUSED_BY_POSTGRES):
                con.execute(CATALOG_DOORS["delete the file list"])
    finally:
        _drop_reader(databases.server, resolved.catalog.pg.dbname, EMBEDDED_READER)
    assert_lake_equals_source(settings, expected_rows=50)


# a query that runs for minutes on this machine: a hundred billion products
LONG_QUERY = "SELECT sum(a.range * b.range) AS s FROM range(300000) a, range(300000) b"


def test_a_session_past_its_timeout_is_stopped_with_the_flag_to_raise(loaded, cli):
    import time

    started = time.monotonic()
    out = sql_error(cli, loaded["env"], "--timeout", "2s", "--sql", "SELECT 1", "--sql", LONG_QUERY)
    assert time.monotonic() - started < 60
    assert out["result"]["commands"][0]["rows"] == [{"1": 1}]  # what ran before it is still shown
    assert "Stopped after --timeout 2s" in out["error"]["message"] and "--timeout 30m" in out["error"]["message"]
    bad = cli("--timeout", "ten minutes", "--sql", "SELECT 1", env=loaded["env"])
    assert bad.returncode == 1 and "'ten minutes' is not a duration" in bad.stderr


def test_limit_shows_the_first_rows_and_counts_the_rest_without_keeping_them(loaded, cli):
    result = cli("--json", "--limit", "3", "--sql", "SELECT range AS i FROM range(2500000) ORDER BY i",
                 env=loaded["env"])
    assert result.returncode == 0, result.stderr
    [command] = json.loads(result.stdout)["result"]["commands"]
    assert command["rows"] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert command["row_count"] == 2_500_000 and command["truncated"] is True
    none = json.loads(cli("--json", "--limit", "0", "--sql", "FROM events", env=loaded["env"]).stdout)
    assert none["result"]["commands"][0]["rows"] == [] and none["result"]["commands"][0]["row_count"] == 300


def test_a_session_spills_into_a_private_folder_not_the_current_one(loaded):
    import os

    with open_session(resolve(loaded["settings"])) as con:
        [[folder]] = con.execute("SELECT current_setting('temp_directory')").fetchall()
        assert not folder.startswith(os.getcwd()) and "event-lake-sql-" in folder
        assert os.stat(folder).st_mode & 0o077 == 0  # only this user can enter it
        with pytest.raises(duckdb.Error):  # the folder DuckDB would have used stays out of reach
            con.execute(f"SELECT * FROM glob('{os.getcwd()}/.tmp/*')").fetchall()


def test_read_only_session_is_bounded_in_memory_and_says_so_when_a_query_is_stopped(loaded, cli):
    """DuckDB's default is 80% of the machine (a 3 GB aggregate reached 6 GB RSS): a session is
    bounded by SQL_MEMORY, or --memory for one session, and a query stopped by it says so."""
    env = {**loaded["env"], "SQL_MEMORY": "48MB"}
    out = sql_error(cli, env, "--sql", "SELECT current_setting('memory_limit') AS m",
                    "--sql", "SELECT list(range) AS l FROM range(40000000)")
    [shown] = out["result"]["commands"][0]["rows"]
    assert "MiB" in shown["m"] and float(shown["m"].split()[0]) < 50  # DuckDB's reading of 48MB
    message = out["error"]["message"]
    assert "SQL_MEMORY" in message and "--memory" in message, message
    spill = cli("--json", "--sql", "SELECT current_setting('max_temp_directory_size') AS m", env=env)
    assert "MiB" in json.loads(spill.stdout)["result"]["commands"][0]["rows"][0]["m"]  # 8 x 48MB, not 90% of the disk
    roomy = cli("--json", "--memory", "2GiB", "--sql", "SELECT current_setting('memory_limit') AS m", env=env)
    assert roomy.returncode == 0, roomy.stdout
    assert "GiB" in json.loads(roomy.stdout)["result"]["commands"][0]["rows"][0]["m"]
    refused = cli("--memory", "lots", "--sql", "SELECT 1", env=env)
    assert refused.returncode != 0 and "--memory 'lots' is not an amount of memory" in refused.stderr + refused.stdout


def test_print_attach_opens_the_lake_as_the_reader_when_there_is_one(read_as_reader, cli):
    """--print-attach attached as the writer role even with a reader configured."""
    settings = resolve(read_as_reader["settings"])
    printed = cli("--print-attach", env=read_as_reader["env"])
    assert printed.returncode == 0, printed.stderr
    assert f"USER '{settings.catalog.reader.user}'" in printed.stdout or settings.catalog.reader.user in printed.stdout
    assert "READ_ONLY" in printed.stdout and "read-only, as the reader role" in printed.stdout
    writer = cli("--print-attach", "--write", env=read_as_reader["env"])
    assert "READ_ONLY" not in writer.stdout and "read-write" in writer.stdout
