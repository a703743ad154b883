"""``--erase``: a subject spread over several Parquet files, inlined rows and the quarantine is gone
from every snapshot, file and catalog table afterwards (read without the project's code: pyarrow
over every file below the data and staging paths, psycopg over every table of the catalog database),
every other row is intact, loads and reconcile never bring it back, and the receipt holds no value."""

from __future__ import annotations

import hmac
import json
import uuid
from datetime import timedelta
from hashlib import sha256
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
import pytest

from pipeline.erase.erasure import Erasure
from pipeline.errors import LockBusy
from pipeline.ops.pipeline import Pipeline
from pipeline.settings import load_settings
from tests.conftest import run_cli, run_main
from tests.faults import ENV as FAULT
from tests.helpers import (
    assert_lake_equals_source,
    lake_query,
    run,
    snapshot_ids,
    source_db,
    write_payloads,
)

SUBJECT = "subject-7f3a"
ERASURE_KEY = "a key the tests keep, outside the lake"
OTHER_SUBJECT = "subject-other"


def _write(settings, rows: list[tuple[str, str]], *, ago: timedelta, table: str = "public.events") -> None:
    """Rows (user, details text) dated ``ago`` before now, 1 ms apart."""
    write_payloads(settings, [("page_view", details) for _, details in rows], ago=ago, table=table)


def _users(n: int, subject_every: int, subject: str = SUBJECT) -> list[tuple[str, str]]:
    users = [subject if i % subject_every == 0 else f"user-{i}" for i in range(n)]
    return [(u, json.dumps({"user_id": u, "page": f"/p/{i}"})) for i, u in enumerate(users)]


def _files_holding(root: Path, value: str) -> list[str]:
    """Every file below ``root`` whose bytes, or whose Parquet values or statistics, hold ``value``."""
    found = []
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        if value.encode() in path.read_bytes():
            found.append(str(path))
        elif path.suffix == ".parquet":
            table = pq.read_table(path)
            text = json.dumps(table.to_pylist(), default=str)
            metadata = pq.ParquetFile(path).metadata
            stats = [str(metadata.row_group(g).column(c).statistics) for g in range(metadata.num_row_groups)
                     for c in range(metadata.num_columns)]
            if value in text or any(value in s for s in stats):
                found.append(str(path))
    return found


def _catalog_tables_holding(dsn: str, value: str) -> list[str]:
    """Every table of the catalog database (any schema) with a row holding ``value``: in its text, in
    a bytea column (DuckLake keeps inlined text as bytea), or in Postgres's statistics of it."""
    found = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = conn.execute("SELECT table_schema, table_name FROM information_schema.tables "
                              "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') "
                              "AND table_type = 'BASE TABLE'").fetchall()
        for schema, name in tables:
            blobs = [column for (column,) in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                "AND data_type = 'bytea'", [schema, name]).fetchall()]
            holds = ["x::text LIKE %(like)s", *(f'position(%(raw)s::bytea IN x."{b}") > 0' for b in blobs)]
            query = f'SELECT count(*) FROM "{schema}"."{name}" x WHERE ' + " OR ".join(holds)
            if conn.execute(query, {"like": f"%{value}%", "raw": value.encode()}).fetchone()[0]:
                found.append(f"{schema}.{name}")
        found += [f"pg_stats {schema}.{name}.{column}" for schema, name, column, text in conn.execute(
            "SELECT schemaname, tablename, attname, concat_ws(' ', most_common_vals::text, histogram_bounds::text) "
            "FROM pg_stats WHERE schemaname NOT IN ('pg_catalog', 'information_schema')").fetchall()
            if text and (value in text or value.encode().hex() in text)]
    return found


def _rows_of(settings, value: str, version: int | None = None) -> int:
    at = f" AT (VERSION => {version})" if version is not None else ""
    if version is not None and not lake_query(settings, "SELECT count(*) FROM lake.snapshots() WHERE snapshot_id = ? "
                                                        "AND snapshot_id >= (SELECT min(snapshot_id) FROM lake.snapshots() "
                                                        "WHERE changes['tables_created'] IS NOT NULL AND "
                                                        "list_contains(changes['tables_created'], 'main.events'))",
                                              [version])[0][0]:
        return 0  # before the table was made
    return lake_query(settings, f"SELECT count(*) FROM lake.main.events{at} "
                                "WHERE json_extract_string(details, '$.user_id') = ?", [value])[0][0]


def _others(settings, subject: str = SUBJECT) -> tuple[int, str]:
    """Count and content checksum of every row not of the subject, with the snapshot each was first
    loaded in (an erasure moves the rows sharing a file with the subject's: they keep it)."""
    return tuple(lake_query(settings, "SELECT count(*), md5(string_agg(event_id::VARCHAR || details::VARCHAR || "
                                      "known_snapshot, ',' ORDER BY event_id)) FROM lake.known.events "
                                      "WHERE json_extract_string(details, '$.user_id') <> ?", [subject])[0])


@pytest.fixture
def erasure_env(lake_env):
    return {**lake_env, "SUBJECT_KEY": "details.user_id", "ERASURE_KEY": ERASURE_KEY}


def _spread_subject(settings) -> None:
    """The subject in two loads' Parquet files, in inlined rows, and in the quarantine."""
    _write(settings, _users(300, 20), ago=timedelta(hours=3))
    assert run(settings, engine="dlt").rows_inserted == 300
    _write(settings, _users(120, 30), ago=timedelta(hours=2))
    assert run(settings, engine="dlt").rows_inserted == 120
    _write(settings, _users(3, 2), ago=timedelta(hours=1))  # 3 rows: DuckLake keeps them inlined
    assert run(settings, engine="dlt").rows_inserted == 3
    with source_db(settings) as conn:  # a row the lake cannot load (quarantined), naming the subject
        conn.execute("ALTER TABLE public.events ALTER COLUMN details TYPE text")
    _write(settings, [(SUBJECT, '{"user_id": "' + SUBJECT + '", bad json')], ago=timedelta(minutes=30))
    report = run(settings, engine="dlt")
    assert report.rows_quarantined == 1, report


def test_erase_removes_the_subject_everywhere_and_never_loads_it_again(erasure_env, tmp_path):
    settings = load_settings(erasure_env)
    _spread_subject(settings)
    data, staging = Path(erasure_env["DUCKLAKE_DATA_PATH"]), Path(erasure_env["STAGING_PATH"])
    held = _rows_of(settings, SUBJECT)
    assert held == 15 + 4 + 2, held  # 300/20 + 120/30 + 2 of 3
    assert lake_query(settings, "SELECT count(*) FROM lake.main.events WHERE event_id IN (SELECT event_id FROM "
                                "lake.main.events) AND json_extract_string(details, '$.user_id') = ?",
                      [SUBJECT])[0][0] == held
    assert len(_files_holding(data, SUBJECT)) >= 2
    with psycopg.connect(erasure_env["DUCKLAKE_CATALOG"], autocommit=True) as conn:
        conn.execute("ANALYZE")  # as autovacuum would: Postgres's statistics of the catalog hold values too
    assert _catalog_tables_holding(erasure_env["DUCKLAKE_CATALOG"], SUBJECT)  # the inlined rows, the stats
    before_others, versions = _others(settings), snapshot_ids(settings)
    # and in the source only: written after the last load (two of four are the subject's)
    _write(settings, _users(4, 2), ago=timedelta(minutes=2))

    # --dry-run: says what it would do, changes nothing
    dry = run_main("--erase", SUBJECT, "--dry-run", "--json", env=erasure_env)
    assert dry.returncode == 0, dry.stderr
    preview = json.loads(dry.stdout)
    assert preview["dry_run"] and preview["tables"]["events"]["rows"] == held
    assert preview["tables"]["events"]["quarantined"] == 1
    assert preview["tables"]["events"]["files"] >= 2 and preview["tables"]["events"]["inlined_rows"] == 2
    assert preview["tables"]["events"]["not_loaded"] == 2
    assert preview["snapshots_expired"], preview
    assert snapshot_ids(settings) == versions and _rows_of(settings, SUBJECT) == held

    # without --yes and without a terminal it refuses, naming the way
    refused = run_main("--erase", SUBJECT, env=erasure_env)
    assert refused.returncode != 0 and "--yes" in refused.stderr and _rows_of(settings, SUBJECT) == held

    done = run_main("--erase", SUBJECT, "--yes", "--json", env=erasure_env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["tables"]["events"]["rows"] == held and report["tables"]["events"]["quarantined"] == 1
    for stream in (done.stdout, done.stderr, dry.stdout, dry.stderr):
        assert SUBJECT not in stream

    # no retained snapshot returns a row of the subject; every other row is as it was
    for version in snapshot_ids(settings):
        assert _rows_of(settings, SUBJECT, version) == 0, version
    assert _others(settings) == before_others
    assert lake_query(settings, "SELECT count(*) FROM lake.ops.quarantine WHERE details LIKE ?",
                      [f"%{SUBJECT}%"])[0][0] == 0
    # no file under the data or staging path, no table of the catalog database holds the value
    assert _files_holding(data, SUBJECT) == []
    assert _files_holding(staging, SUBJECT) == []
    assert _catalog_tables_holding(erasure_env["DUCKLAKE_CATALOG"], SUBJECT) == []

    # the source still holds the rows: the lake is healthy, and no load or reconcile brings them back
    status = run_main("--status", "--json", env=erasure_env)
    assert status.returncode == 0, status.stdout + status.stderr
    _write(settings, _users(10, 5), ago=timedelta(minutes=1))  # 2 more of the subject's, new ids: loaded
    assert run(settings, engine="dlt").rows_inserted == 2 + 10  # not the 2 the source held at the erasure
    reconciled = run_main("--reconcile", "--since", "all", "--json", env=erasure_env)
    assert reconciled.returncode == 0, reconciled.stderr
    # the erased rows the source holds are absent on purpose: no hour differs, nothing is staged again
    assert json.loads(reconciled.stdout)["hours_differing"] == [], reconciled.stdout
    assert _rows_of(settings, SUBJECT) == 2  # only the two written after the erasure
    assert_lake_equals_source(settings)  # --verify: the erased rows are absent on purpose

    # the receipt: a keyed hash under ERASURE_KEY, which the lake does not hold, never the value
    listed = run_main("--erasures", "--json", env=erasure_env)
    assert listed.returncode == 0, listed.stderr
    [receipt] = json.loads(listed.stdout)["erasures"]
    assert SUBJECT not in listed.stdout
    assert receipt["value_hash"] == hmac.new(ERASURE_KEY.encode(), SUBJECT.encode(), sha256).hexdigest()
    assert receipt["state"] == "done" and receipt["rows_erased"]["events"] == held
    assert receipt["snapshot_id"] in snapshot_ids(settings)


def test_a_kill_during_the_erasure_is_completed_by_the_rerun(erasure_env):
    settings = load_settings(erasure_env)
    _spread_subject(settings)
    data = Path(erasure_env["DUCKLAKE_DATA_PATH"])
    before_others = _others(settings)
    for point in ("erase-after-commit", "erase-mid-move", "erase-after-rewrite"):
        killed = run_cli("tests/faulty_cli.py", "--erase", SUBJECT, "--yes", env={**erasure_env, FAULT: point})
        assert killed.returncode == -9, (point, killed.stderr)
        if point == "erase-mid-move":  # killed between two files' moves: one moved, others not yet
            assert lake_query(settings, "SELECT count(*) FROM ducklake_list_files('lake', 'events') "
                                        "WHERE delete_file IS NOT NULL")[0][0] > 0
        # the commit stands: no current row of the subject, whatever the history still holds
        assert _rows_of(settings, SUBJECT) == 0
        listed = run_main("--erasures", env=erasure_env)
        assert listed.returncode != 0 and "interrupted" in listed.stdout + listed.stderr
        status = run_main("--status", env=erasure_env)
        assert status.returncode == 2 and "interrupted" in status.stdout + status.stderr
    rerun = run_main("--erase", SUBJECT, "--yes", "--json", env=erasure_env)
    assert rerun.returncode == 0, rerun.stderr
    # the second kill struck while that run completed the first one (it does so before anything else);
    # the rerun completes that receipt and writes none of its own: one request, one receipt
    completed = json.loads(rerun.stdout)
    assert len(completed["completed_before"]) == 1 and completed["already_erased"] == completed["completed_before"][0]
    for version in snapshot_ids(settings):
        assert _rows_of(settings, SUBJECT, version) == 0, version
    assert _files_holding(data, SUBJECT) == []
    assert _catalog_tables_holding(erasure_env["DUCKLAKE_CATALOG"], SUBJECT) == []
    assert _others(settings) == before_others
    [receipt] = json.loads(run_main("--erasures", "--json", env=erasure_env).stdout)["erasures"]
    assert receipt["state"] == "done" and receipt["rows_erased"]["events"] == 21, receipt


def test_one_erasure_covers_every_table_in_one_commit(new_lake_env):
    env = {**new_lake_env(""), "SOURCE_TABLES": "public.events,public.clicks",
           "SUBJECT_KEY": "events=details.user_id,clicks=details.user_id", "ERASURE_KEY": ERASURE_KEY}
    settings = load_settings(env)
    _write(settings, _users(50, 10), ago=timedelta(hours=2))
    _write(settings, _users(40, 8), ago=timedelta(hours=2), table="public.clicks")
    run(settings, engine="dlt")
    with Pipeline(settings) as pipeline:
        dry = pipeline.erase(SUBJECT, dry_run=True)
        report = pipeline.erase(SUBJECT)
    assert {name: t.rows for name, t in dry.tables.items()} == {"events": 5, "clicks": 5}
    assert {name: t.rows for name, t in report.tables.items()} == {"events": 5, "clicks": 5}
    commits = lake_query(settings, "SELECT count(*) FROM lake.snapshots() WHERE commit_message LIKE 'erase a subject%'")
    assert commits[0][0] <= 1  # one commit deleted from both (expired with the files it listed)
    for table in ("events", "clicks"):
        assert lake_query(settings, f"SELECT count(*) FROM lake.main.{table} "
                                    "WHERE json_extract_string(details, '$.user_id') = ?", [SUBJECT])[0][0] == 0
    assert_lake_equals_source(settings)


@pytest.mark.parametrize("catalog", ["postgres", "sqlite", "duckdb"])
def test_a_subject_alone_in_its_files_leaves_no_bound_in_the_catalog(catalog, erasure_env, tmp_path):
    """The subject's rows fill their own load's file (DuckLake drops such a file at the DELETE and has
    nothing to rewrite, so its own rewrite never makes the table's bounds again), and its value is
    the key's smallest: the catalog's table statistics must lose it too, whatever the catalog. Every
    other row keeps its first snapshot (``lake.known``), its file moved or not."""
    value = "aaa-subject-alone"
    if catalog != "postgres":
        erasure_env = {**erasure_env, "DUCKLAKE_CATALOG": f"{catalog}:{tmp_path / ('catalog.' + catalog)}"}
    settings = load_settings(erasure_env)
    _write(settings, _users(40, 1, subject=value), ago=timedelta(hours=2))  # only the subject
    run(settings, engine="dlt")
    _write(settings, _users(60, 20, subject=value), ago=timedelta(hours=1))  # and shared with others
    run(settings, engine="dlt")
    _write(settings, _users(50, 1000, subject=value), ago=timedelta(minutes=30))  # once, at i = 0
    run(settings, engine="dlt")
    before = _others(settings, value)
    [[metadata]] = lake_query(settings, "SELECT getvariable('lake_metadata')")
    bounds = (f"SELECT count(*) FROM {metadata}.ducklake_table_column_stats "
              "WHERE contains(min_value, ?) OR contains(max_value, ?)")
    assert lake_query(settings, bounds, [value, value]) != [(0,)]  # a bound holds it now
    with Pipeline(settings) as pipeline:
        report = pipeline.erase(value)
    assert report.tables["events"].rows == 40 + 3 + 1
    assert lake_query(settings, bounds, [value, value]) == [(0,)]
    if catalog == "postgres":
        assert _catalog_tables_holding(erasure_env["DUCKLAKE_CATALOG"], value) == []
    assert _files_holding(Path(erasure_env["DUCKLAKE_DATA_PATH"]), value) == []
    assert _others(settings, value) == before
    assert lake_query(settings, "SELECT count(*) FROM lake.main.events WHERE json_extract_string(details, "
                                "'$.user_id') >= 'user-'") == [(57 + 49,)]  # the bounds still cover the rest


def test_erase_without_a_subject_key_is_refused(lake_env):
    refused = run_main("--erase", "x", "--yes", env=lake_env)
    assert refused.returncode != 0 and "SUBJECT_KEY" in refused.stderr


def test_erase_without_an_erasure_key_is_refused_before_anything_changes(erasure_env):
    """A receipt hashed with a key the lake holds (its id, once) is reversed by anyone who reads the
    lake: without ERASURE_KEY nothing is erased, and the error names the fix."""
    settings = load_settings(erasure_env)
    _write(settings, _users(10, 2), ago=timedelta(hours=1))
    assert run(settings, engine="dlt").rows_inserted == 10
    versions = snapshot_ids(settings)
    env = {name: value for name, value in erasure_env.items() if name != "ERASURE_KEY"}
    for dry in ((), ("--dry-run",)):
        refused = run_main("--erase", SUBJECT, "--yes", *dry, env=env)
        assert refused.returncode != 0 and "ERASURE_KEY" in refused.stderr, refused.stderr
        assert "ERASURE_KEY_FILE" in refused.stderr and SUBJECT not in refused.stderr
    assert snapshot_ids(settings) == versions and _rows_of(settings, SUBJECT) == 5


def _catalog_files_holding(dsn: str, value: str) -> list[str]:
    """The catalog database's relation files (every one under its folder: tables, TOAST, indexes,
    its own pg_statistic) whose bytes hold ``value``, after a CHECKPOINT wrote every page out and
    dropped the files of rewritten relations: a dead version of a row is found here, not by SQL."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        [[directory, oid]] = conn.execute(
            "SELECT current_setting('data_directory'), oid FROM pg_database "
            "WHERE datname = current_database()").fetchall()
        folder = Path(directory) / "base" / str(oid)
        try:
            files = [path for path in folder.iterdir() if path.is_file()]
        except PermissionError:
            pytest.skip(f"the server's files ({folder}) are not readable by this user")
        holding = sorted(path.name for path in files if value.encode() in path.read_bytes())
        # named by the relation each file is now (a file no relation has: left behind by a rewrite)
        return [f"{name} ({conn.execute('SELECT pg_filenode_relation(0, %s)::text', [int(name.split('.')[0].split('_')[0])]).fetchone()[0]})"
                for name in holding]


def test_no_byte_of_the_subject_is_left_in_the_catalog_files_or_the_quarantine_nor_put_back(erasure_env):
    """The subject in files, inlined rows, a payload cut short right after the value and one cut
    inside its closing quote, an unreadable one, a row of an infinite time (re-read by every load):
    after the erasure no relation file of the catalog database holds the value (dead versions and
    pg_statistic included), nor any file under the data, staging or home folders; three more loads
    put nothing back; a second request writes no receipt; the receipt is not the lake's to reverse."""
    subject = f"sübject-{uuid.uuid4().hex[:10]}"  # the test databases are reused: a value of its own
    settings = load_settings(erasure_env)
    _write(settings, _users(200, 20, subject), ago=timedelta(hours=3))
    assert run(settings, engine="dlt").rows_inserted == 200
    _write(settings, _users(3, 2, subject), ago=timedelta(hours=2))  # inlined rows
    assert run(settings, engine="dlt").rows_inserted == 3
    with source_db(settings) as conn:
        conn.execute("ALTER TABLE public.events ALTER COLUMN details TYPE text")
        conn.execute("INSERT INTO public.events (event_id, event_type, event_timestamp, details) VALUES "
                     "(gen_random_uuid(), 'page_view', 'infinity', %s)", [json.dumps({"user_id": subject})])
    _write(settings, [(subject, '{"user_id": "' + subject + '"'), (subject, '{"user_id": "' + subject),
                      (subject, '{"user_id": "' + subject + '", bad'),
                      # JSON's other spelling of ü, in capitals: the same value (found by the adversary)
                      (subject, '{"user_id": "' + subject.replace("ü", "\\u00FC")),
                      ("other", '{"user_id": "' + subject[:-1])],  # cut within the value: not it
           ago=timedelta(minutes=30))
    assert run(settings, engine="dlt").rows_quarantined == 6
    catalog = erasure_env["DUCKLAKE_CATALOG"]
    with psycopg.connect(catalog, autocommit=True) as conn:
        conn.execute("ANALYZE")  # as autovacuum would: Postgres's statistics of the catalog hold values
    assert _catalog_files_holding(catalog, subject)  # the search finds what is there
    folders = [Path(erasure_env[name]) for name in ("DUCKLAKE_DATA_PATH", "STAGING_PATH", "EVENT_LAKE_HOME")]

    dry = json.loads(run_main("--erase", subject, "--dry-run", "--json", env=erasure_env).stdout)
    assert dry["tables"]["events"]["quarantined"] == 5, dry
    done = run_main("--erase", subject, "--yes", "--json", env=erasure_env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["tables"]["events"]["quarantined"] == 5 and report["catalog_vacuum"] == "full", report
    # the dry run named exactly the snapshots of the lake the erasure then expired; the rest are its own
    own = report["own_snapshots_expired"]
    assert report["snapshots_expired"][:len(report["snapshots_expired"]) - own] == dry["snapshots_expired"]
    assert dry["files_held"] == report["files_held"] > 0
    assert lake_query(settings, "SELECT details FROM lake.ops.quarantine") == [('{"user_id": "' + subject[:-1],)]
    assert _catalog_files_holding(catalog, subject) == []
    for _ in range(3):  # the infinite time is read again by every load, beside new events
        _write(settings, _users(2, 1000, "x")[1:] * 2, ago=timedelta(minutes=1))
        assert run(settings, engine="dlt").rows_inserted == 2
        assert lake_query(settings, "SELECT count(*) FROM lake.ops.quarantine")[0][0] == 1
    with psycopg.connect(catalog, autocommit=True) as conn:
        conn.execute("ANALYZE")
    assert _catalog_files_holding(catalog, subject) == []
    assert _catalog_tables_holding(catalog, subject) == []
    for folder in folders:
        assert _files_holding(folder, subject) == [], folder

    # a second request: already erased, nothing written, no second receipt
    versions = snapshot_ids(settings)
    again = run_main("--erase", subject, "--yes", "--json", env=erasure_env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["already_erased"] == report["erasure_id"]
    assert "already erased" in run_main("--erase", subject, "--yes", env=erasure_env).stdout
    assert snapshot_ids(settings) == versions
    [receipt] = json.loads(run_main("--erasures", "--json", env=erasure_env).stdout)["erasures"]
    # a read-only session holds nothing that reverses the receipt: the key is nowhere in the lake
    readable = run_main("--sql", "SELECT * FROM ops.lake_identity", "--json", env=erasure_env)
    assert readable.returncode == 0 and ERASURE_KEY not in readable.stdout
    assert _catalog_tables_holding(catalog, ERASURE_KEY) == []
    for guess in (subject, *lake_query(settings, "SELECT * FROM lake.ops.lake_identity")[0]):
        assert receipt["value_hash"] != hmac.new(str(guess).encode(), subject.encode(), sha256).hexdigest()


def test_a_bigint_keyed_table_listed_second_by_a_column_whose_min_is_the_subject(new_lake_env, monkeypatch):
    """A key that is not a UUID, a table named second, a plain text column as the key, and the
    subject's value the smallest of the column (its files' and the table's min statistics). The table
    without a SUBJECT_KEY cannot promote meanwhile: its promotions write the quarantine too, whose
    bounds the erasure makes again outside DuckLake's transactions."""
    env = {**new_lake_env(""), "SOURCE_TABLES": "public.events,public.orders:placed_at:order_id",
           "SUBJECT_KEY": "orders=customer", "ERASURE_KEY": ERASURE_KEY}
    settings = load_settings(env)
    _write(settings, _users(20, 5), ago=timedelta(hours=1))
    value = "aaa-first-customer"
    with source_db(settings) as conn:
        conn.execute("CREATE TABLE public.orders (order_id bigserial PRIMARY KEY, placed_at timestamptz NOT NULL, "
                     "customer text, created_at timestamptz DEFAULT now())")
        conn.execute("INSERT INTO public.orders (placed_at, customer) SELECT now() - interval '50 minutes' + "
                     "make_interval(secs => i), CASE WHEN i %% 4 = 0 THEN %s ELSE 'customer-' || i END "
                     "FROM generate_series(1, 200) i", [value])
    run(settings, engine="dlt")
    busy: list[str] = []
    rewrite = Erasure.rewrite

    def rewrite_while_probing(erasure: Erasure) -> tuple[int, int]:
        with pytest.raises(LockBusy), erasure.lake.table_named("events").lock("promote", timeout=0.2):
            pass
        busy.append("events")
        return rewrite(erasure)

    monkeypatch.setattr(Erasure, "rewrite", rewrite_while_probing)
    with Pipeline(settings) as pipeline:
        report = pipeline.erase(value)
    assert busy == ["events"]
    assert report.tables["orders"].rows == 50 and "events" not in report.tables
    assert lake_query(settings, "SELECT count(*) FROM lake.main.orders WHERE customer = ?", [value]) == [(0,)]
    assert lake_query(settings, "SELECT count(*) FROM lake.main.orders") == [(150,)]
    assert lake_query(settings, "SELECT count(*) FROM lake.main.events") == [(20,)]  # untouched
    assert _files_holding(Path(env["DUCKLAKE_DATA_PATH"]), value) == []
    assert _catalog_tables_holding(env["DUCKLAKE_CATALOG"], value) == []
    with source_db(settings) as conn:  # a new order of another customer loads as usual
        conn.execute("INSERT INTO public.orders (placed_at, customer) VALUES (now() - interval '1 minute', 'new')")
    assert run(settings, engine="dlt").rows_inserted == 1
    assert_lake_equals_source(settings)


def test_files_a_killed_load_left_behind_are_erased_too(erasure_env):
    """A load killed inside its transaction leaves Parquet files its catalog never listed (orphans,
    which maintenance deletes only after an hour): those holding the subject go with the erasure."""
    settings = load_settings(erasure_env)
    _write(settings, _users(200, 10), ago=timedelta(hours=2))
    killed = run_cli("tests/faulty_cli.py", "--run", "--engine", "dlt", env={**erasure_env, FAULT: "before-commit"})
    assert killed.returncode == -9, killed.stderr
    assert run(settings, engine="dlt").rows_inserted == 200
    data = Path(erasure_env["DUCKLAKE_DATA_PATH"])
    assert len(_files_holding(data, SUBJECT)) >= 2  # the loaded file and the killed load's orphan
    done = run_main("--erase", SUBJECT, "--yes", "--json", env=erasure_env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["orphans_deleted"] >= 1
    assert _files_holding(data, SUBJECT) == []
    assert_lake_equals_source(settings)


def test_an_interrupted_erasure_completed_by_another_request_reaches_rows_only_in_history(erasure_env):
    """A row was the subject's only in an older snapshot (the source re-attributed it, --repair
    replaced it): no tombstone names its id. The erasure is killed after its commit, and the next
    request, for another person, completes it without the value: by what its receipt recorded."""
    settings = load_settings(erasure_env)
    _write(settings, [(SUBJECT, json.dumps({"user_id": SUBJECT}))] + _users(39, 1000, "x")[1:],
           ago=timedelta(hours=4))
    run(settings, engine="dlt")
    with source_db(settings) as conn:
        conn.execute("UPDATE public.events SET details = '{\"user_id\": \"someone-else\"}' "
                     "WHERE details->>'user_id' = %s", [SUBJECT])
    assert run_main("--repair", env=erasure_env).returncode == 0
    _write(settings, _users(40, 5), ago=timedelta(hours=2))
    run(settings, engine="dlt")
    killed = run_cli("tests/faulty_cli.py", "--erase", SUBJECT, "--yes",
                     env={**erasure_env, FAULT: "erase-after-commit"})
    assert killed.returncode == -9, killed.stderr
    other = run_main("--erase", OTHER_SUBJECT, "--yes", "--json", env=erasure_env)
    assert other.returncode == 0, other.stderr
    assert len(json.loads(other.stdout)["completed_before"]) == 1
    for version in snapshot_ids(settings):
        assert _rows_of(settings, SUBJECT, version) == 0, version
    assert _files_holding(Path(erasure_env["DUCKLAKE_DATA_PATH"]), SUBJECT) == []


def test_a_source_that_cannot_be_read_stops_the_erasure_before_anything_changes(erasure_env):
    """The source is read for the subject's rows no load took yet (a later load would take them): when
    it cannot be, nothing is erased, the exit says so, and the lake is as it was."""
    settings = load_settings(erasure_env)
    _write(settings, _users(40, 4), ago=timedelta(hours=1))
    run(settings, engine="dlt")
    versions = snapshot_ids(settings)
    away = {**erasure_env, "SOURCE_PG_DSN": erasure_env["SOURCE_PG_DSN"].replace("port=5432", "port=1")}
    assert away["SOURCE_PG_DSN"] != erasure_env["SOURCE_PG_DSN"]
    refused = run_main("--erase", SUBJECT, "--yes", env=away)
    assert refused.returncode != 0 and "source" in refused.stderr.lower(), refused.stderr
    assert snapshot_ids(settings) == versions and _rows_of(settings, SUBJECT) == 10


def test_a_value_within_another_takes_only_its_own_unreadable_quarantined_rows(erasure_env):
    """Rows set aside for JSON that cannot be read are the subject's for the key's name and the value
    as a whole JSON string or number: erasing user_1 leaves user_10's and user_100's, erasing 1 leaves
    a row whose other key holds 1 (were they taken, no check would ever say so: their ids would be
    tombstoned)."""
    settings = load_settings(erasure_env)
    _write(settings, _users(10, 1000, "x")[1:], ago=timedelta(hours=1))
    with source_db(settings) as conn:
        conn.execute("ALTER TABLE public.events ALTER COLUMN details TYPE text")
    _write(settings, [(user, '{"user_id": "' + user + '", bad') for user in ("user_1", "user_10", "user_100")]
           + [("n", '{"user_id": 1, bad'), ("n", '{"user_id": 10, bad'), ("n", '{"user_id": "u-9", "n": 1, bad')],
           ago=timedelta(minutes=30))
    assert run(settings, engine="dlt").rows_quarantined == 6
    with Pipeline(settings) as pipeline:
        assert pipeline.erase("user_1").tables["events"].quarantined == 1
        assert pipeline.erase("1").tables["events"].quarantined == 1
    left = lake_query(settings, "SELECT details FROM lake.ops.quarantine ORDER BY details")
    assert [row[0] for row in left] == ['{"user_id": "u-9", "n": 1, bad', '{"user_id": "user_10", bad',
                                        '{"user_id": "user_100", bad', '{"user_id": 10, bad'], left


def test_a_catalog_role_that_owns_no_table_erases_and_says_what_vacuum_is_left(erasure_env):
    """A catalog reached as a role with every privilege on DuckLake's tables but owning none (Postgres
    lets only the owner VACUUM FULL or retype a column, and only warns for VACUUM), its statistics
    gathered as autovacuum would: the erasure completes, and its receipt names what is left."""
    settings = load_settings(erasure_env)
    _spread_subject(settings)
    role = f"el_test_erase_{uuid.uuid4().hex[:8]}"
    catalog = erasure_env["DUCKLAKE_CATALOG"]
    with psycopg.connect(catalog, autocommit=True) as conn:
        conn.execute("ANALYZE")
        conn.execute(f"CREATE ROLE {role} LOGIN")
        [[database]] = conn.execute("SELECT current_database()").fetchall()
        for grant in (f'ALL ON DATABASE "{database}"', "ALL ON SCHEMA lake", "ALL ON ALL TABLES IN SCHEMA lake",
                      "ALL ON ALL SEQUENCES IN SCHEMA lake"):
            conn.execute(f"GRANT {grant} TO {role}")
    try:
        done = run_main("--erase", SUBJECT, "--yes", "--json", env={**erasure_env,
                        "DUCKLAKE_CATALOG": catalog.replace("user=postgres", f"user={role}")})
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert "not owned by the catalog role" in report["catalog_vacuum"], report["catalog_vacuum"]
        assert _rows_of(settings, SUBJECT) == 0
    finally:
        from pipeline.lake import instances

        instances.drop_all()
        with psycopg.connect(catalog, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role])
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")
