"""The catalog's advisory locks (pipeline/lake/locks.py) when a lock connection is cut by the
network: the server keeps the cut session, and its lock, alive; a process that then waited for
its own lock waited forever (a follower stuck for 60 s at shutdown, recording its job history).
A wait ends such a ghost of its own process, never a live holder, and says who holds a lock."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from pipeline.errors import LockBusy
from pipeline.lake import locks
from pipeline.settings import load_settings
from pipeline.settings.resolve import resolve
from tests.conftest import ROOT


def _held_on_the_server(direct_dsn: str, settings, job: str) -> int:
    """Sessions the catalog server itself says hold ``job``'s lock: in this catalog database only,
    as advisory locks are per database and tests on other workers hold the same key in theirs."""
    key = locks.lock_key(locks.lake_lock(settings.lake_name, job)) & 0xFFFF_FFFF_FFFF_FFFF
    with psycopg.connect(direct_dsn) as conn:
        return conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                            "AND classid = %s::oid AND objid = %s::oid "
                            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                            (key >> 32, key & 0xFFFF_FFFF)).fetchone()[0]


def test_a_lock_connection_cut_by_the_network_does_not_lock_its_own_process_out(lake_env, caplog):
    """The ghost as the server sees it: a session in this process's name, holding the lock, that
    none of its open lock connections is (a connection the network cut, the process moved on).
    Made directly: a proxy that cuts connections closes them properly, which the network does not."""
    settings = resolve(load_settings(lake_env))
    dsn = settings.catalog.pg.conninfo()
    key = locks.lock_key(locks.lake_lock(settings.lake_name, "attach"))
    ghost = psycopg.connect(dsn, autocommit=True, application_name=locks.application_name())
    try:
        assert ghost.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
        assert _held_on_the_server(dsn, settings, "attach") == 1
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="pipeline.lake.locks"), \
                locks.hold(settings, "attach", timeout=30) as lease:
            lease.check()
        waited = time.monotonic() - started
        with pytest.raises(psycopg.OperationalError):
            ghost.execute("SELECT 1")  # ended by the server
    finally:
        ghost.close()
    assert waited < 10, waited  # was: the full timeout (forever, without one)
    assert "held by a session of this process whose connection was cut" in caplog.text


def test_a_live_holder_in_this_process_is_never_taken_for_a_ghost(lake_env, monkeypatch):
    monkeypatch.setattr(locks, "GHOST_CHECK_SECONDS", 0.5)  # 2 s in the product: the same checks, sooner
    settings = resolve(load_settings(lake_env))
    holding, release = threading.Event(), threading.Event()
    leases = []

    def holder() -> None:
        with locks.hold(settings, "setup") as lease:
            leases.append(lease)
            holding.set()
            release.wait(60)
            lease.check()  # still ours: its connection was not ended

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert holding.wait(30)
        with pytest.raises(LockBusy), locks.hold(settings, "setup", timeout=locks.GHOST_CHECK_SECONDS * 2):
            pass
        leases[0].check()
    finally:
        release.set()
        thread.join(30)


def test_a_wait_says_which_process_holds_the_lock(lake_env, caplog, monkeypatch):
    monkeypatch.setattr(locks, "SAY_WHO_AFTER_SECONDS", 0.5)  # 5 s in the product: the same path, sooner
    settings = resolve(load_settings(lake_env))
    code = ("import sys, time; from pipeline.lake import locks; from pipeline.settings import load_settings; "
            "from pipeline.settings.resolve import resolve; import os\n"
            "with locks.hold(resolve(load_settings(dict(os.environ))), 'promote'):\n"
            "    print('held', flush=True); time.sleep(60)")
    other = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=lake_env, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        with caplog.at_level(logging.WARNING, logger="pipeline.lake.locks"), pytest.raises(LockBusy), \
                locks.hold(settings, "promote", timeout=locks.SAY_WHO_AFTER_SECONDS + 2):
            pass
        assert other.poll() is None  # another process's lock is waited for, never ended
    finally:
        other.kill()
        other.wait()
    assert f"waiting for the {locks.lake_lock(settings.lake_name, 'promote')} lock, held by event-lake " in caplog.text
    assert f" {other.pid} (server pid " in caplog.text


def test_the_lake_is_set_up_under_the_whole_lakes_lock_whichever_table_is_listed_first(lake_env, monkeypatch):
    """Its ops tables and job history are the lake's, not a table's: made under a lock named after the
    first table listed, two processes listing the tables in other orders made them at once."""
    from generators.writer import add_sessions
    from tests.helpers import run

    taken: list[str] = []
    hold_named = locks.hold_named

    def recording(catalog, name, job, **kwargs):
        taken.append(name)
        return hold_named(catalog, name, job, **kwargs)

    monkeypatch.setattr(locks, "hold_named", recording)
    settings = resolve(load_settings({**lake_env, "SOURCE_TABLES": "public.events,"
                                                                    "public.sessions:started_at:session_id"}))
    add_sessions(settings.source_dsn, "public.sessions", "public.events", 3, seed=1)
    assert run(settings, engine="dlt").rows_inserted == 3 + 9
    setup = [name for name in taken if name.endswith(":setup")]
    assert setup and set(setup) == {locks.lake_lock(settings.lake_name, "setup")}, taken
