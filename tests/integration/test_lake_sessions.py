"""A process's lake sessions share one attach per lake (pipeline.lake.instances): what that must
not change — each session sees what other writers committed, a failed session's attach is not
reused, a lost catalog reads as one, threads get sessions of their own."""

from __future__ import annotations

import threading

import psycopg
import pytest

from pipeline.errors import CatalogUnavailable
from pipeline.lake import connect as lake
from pipeline.lake import instances
from pipeline.settings import load_settings
from pipeline.settings.pgdsn import PgDsn
from pipeline.settings.resolve import resolve
from tests.helpers import TcpProxy, events_table


def _count(settings) -> int:
    with lake.lake_session(settings, read_only=True) as con:
        return con.execute(f"SELECT count(*) FROM {events_table(settings)}").fetchone()[0]


def _insert(con, settings, rows: int) -> None:
    con.execute(f"INSERT INTO {events_table(settings)} (event_id, event_type, event_timestamp, details, "
                f"created_at) SELECT uuid(), 't', now(), '{{}}', now() FROM range({rows})")


@pytest.fixture
def made(lake_env):
    settings = resolve(load_settings(lake_env))
    with lake.lake_session(settings, tables=True):
        pass
    return settings


def test_sessions_share_one_attach_and_see_what_other_writers_commit(made, monkeypatch):
    instances.drop_all()  # as a new process
    attaches: list[bool] = []
    real = lake.connect
    monkeypatch.setattr(lake, "connect", lambda *a, **k: attaches.append(k.get("read_only", False)) or real(*a, **k))
    assert _count(made) == 0
    other = real(made)  # another writer: an instance of its own, as another process has
    try:
        _insert(other, made, 7)
        assert _count(made) == 7
        _insert(other, made, 5)
        assert _count(made) == 12
    finally:
        other.close()
    assert attaches == [True]  # three read sessions, one read-only attach
    with lake.lake_session(made, tables=True) as con:  # a writer's session: its own attach, then shared
        _insert(con, made, 1)
    with lake.lake_session(made, tables=True) as con:
        _insert(con, made, 1)
    assert attaches == [True, False]
    assert _count(made) == 14


def test_a_session_that_fails_leaves_no_attach_behind_and_rolls_back(made, monkeypatch):
    instances.drop_all()  # as a new process
    attaches: list[str] = []
    real = lake.connect
    monkeypatch.setattr(lake, "connect", lambda *a, **k: attaches.append("attach") or real(*a, **k))
    with pytest.raises(RuntimeError), lake.lake_session(made) as con:
        con.execute("BEGIN")
        _insert(con, made, 3)
        raise RuntimeError("the block failed mid-transaction")
    with lake.lake_session(made) as con:
        assert con.execute(f"SELECT count(*) FROM {events_table(made)}").fetchone()[0] == 0
        assert con.execute("SELECT current_setting('TimeZone')").fetchone()[0] == "UTC"
    assert attaches == ["attach", "attach"]


def test_a_lost_catalog_is_an_attach_error_and_a_returned_one_is_used_again(lake_env):
    catalog = PgDsn.parse(lake_env["DUCKLAKE_CATALOG"])
    proxy = TcpProxy(catalog.host, catalog.port)
    proxy.start()
    try:
        settings = resolve(load_settings({
            **lake_env, "DUCKLAKE_CATALOG": f"postgresql://{catalog.user}@127.0.0.1:{proxy.port}/{catalog.dbname}"}))
        with lake.lake_session(settings, tables=True):
            pass
        assert _count(settings) == 0
        proxy.stop()  # the pooled attach's connections are cut, and new ones refused
        with pytest.raises(CatalogUnavailable) as lost:
            _count(settings)
        assert f"DUCKLAKE_CATALOG={settings.catalog.describe()}" in str(lost.value)  # as a new attach says
        proxy.start()
        assert _count(settings) == 0
    finally:
        proxy.stop()


def test_a_session_with_the_source_sees_its_tables_as_they_are_now(made):
    with psycopg.connect(made.source_dsn.conninfo(), autocommit=True) as conn:
        conn.execute("CREATE TABLE visits (id int)")
        with lake.lake_session(made, read_only=True, source=True) as con:
            assert con.execute("SELECT column_name FROM (DESCRIBE src.public.visits)").fetchall() == [("id",)]
        conn.execute("ALTER TABLE visits ADD COLUMN region text")
    with lake.lake_session(made, read_only=True, source=True) as con:
        assert con.execute("SELECT column_name FROM (DESCRIBE src.public.visits)").fetchall() == [("id",), ("region",)]


def test_threads_read_while_a_writer_commits(made):
    """Dashboard pages and /metrics scrapes read from threads of one process: each gets its own
    cursor and transaction, and never sees fewer rows than a commit it saw before."""
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        seen = 0
        try:
            while not done.is_set():
                now = _count(made)
                assert now >= seen
                seen = now
        except BaseException as exc:  # noqa: BLE001  reported by the main thread
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    try:
        for _ in range(5):
            with lake.lake_session(made, tables=True) as con:
                _insert(con, made, 10)
    finally:
        done.set()
        for reader in readers:
            reader.join()
    assert errors == []
    assert _count(made) == 50


def test_extension_signatures_are_checked_once_per_process_and_always_for_sql_sessions(made, monkeypatch):
    """DuckDB checks an extension's signature at each load (hashing ~40 MB); a lake session loads
    again only what this process has checked, and a --sql session (a user's SQL) checks every time."""
    from pipeline.lake import extensions
    from pipeline.sql_session.query import open_session

    def unchecked_loads_allowed(con) -> bool:
        return con.execute("SELECT current_setting('allow_unsigned_extensions')").fetchone()[0]

    monkeypatch.setattr(extensions, "_checked", set())  # as a new process
    instances.drop_all()
    with lake.lake_session(made, read_only=True) as con:
        assert not unchecked_loads_allowed(con)  # the first load of each extension is checked
        assert con.execute("SELECT current_setting('autoload_known_extensions')").fetchone()[0] is False
    assert extensions._checked == {"ducklake", "postgres_scanner"}
    instances.drop_all()
    with lake.lake_session(made, read_only=True) as con:
        assert unchecked_loads_allowed(con)  # the same libraries, already mapped and checked
        assert con.execute(f"SELECT count(*) FROM {events_table(made)}").fetchone()[0] == 0
    with lake.lake_session(made, read_only=True, source=True) as con:  # postgres_scanner: checked too
        assert unchecked_loads_allowed(con)
    sql = open_session(made)
    try:
        assert not unchecked_loads_allowed(sql)
    finally:
        sql.close()
    monkeypatch.setattr(extensions, "_checked", {"ducklake"})  # one not checked yet: all are checked
    instances.drop_all()
    with lake.lake_session(made, read_only=True) as con:
        assert not unchecked_loads_allowed(con)
