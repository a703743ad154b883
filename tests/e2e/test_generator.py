"""The generator: realistic weighted events, COPY batches, exact committed counts."""

from __future__ import annotations

import psycopg
import pytest

from generators.events import EVENT_WEIGHTS
from tests.conftest import run_cli


def test_cli_creates_the_table_and_reports_committed_rows(lake_env):
    result = run_cli("insert_event_data_loop.py", "--rows", "2500", "--loops", "2", "--delay", "0",
                     "--batch-size", "1000", "--seed", "9", env=lake_env)
    assert result.returncode == 0, result.stderr
    assert "Generator done: 5000 events committed" in result.stdout.splitlines()[-1]
    with psycopg.connect(lake_env["SOURCE_PG_DSN"]) as conn:
        counts = conn.execute("SELECT count(*), count(DISTINCT event_id) FROM events").fetchone()
        assert counts == (5000, 5000)
        types = dict(conn.execute("SELECT event_type, count(*) FROM events GROUP BY 1").fetchall())
    assert set(types) == set(EVENT_WEIGHTS)


def test_cli_truncate_empties_the_table_first(lake_env):
    run_cli("insert_event_data_loop.py", "--rows", "300", env=lake_env)
    result = run_cli("insert_event_data_loop.py", "--rows", "200", "--truncate", env=lake_env)
    assert result.returncode == 0
    with psycopg.connect(lake_env["SOURCE_PG_DSN"]) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 200


def test_sigterm_in_continuous_mode_exits_cleanly_with_totals(lake_env):
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT

    env = {**{k: v for k, v in os.environ.items()}, **lake_env}
    proc = subprocess.Popen([sys.executable, str(ROOT / "insert_event_data_loop.py"), "--continuous",
                             "--rows", "500", "--delay", "0.2"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    time.sleep(4)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    committed = int(out.strip().splitlines()[-1].split(":")[1].split()[0])
    with psycopg.connect(lake_env["SOURCE_PG_DSN"]) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == committed > 0


@pytest.mark.parametrize(("flag", "value", "allowed"), [("--delay", "-1", "0 seconds or more"),
                                                        ("--workers", "0", "1 or more"),
                                                        ("--late-fraction", "1.5", "between 0 and 1")])
def test_out_of_range_flags_are_refused_naming_the_value(flag, value, allowed, lake_env):

    result = run_cli("insert_event_data_loop.py", "--rows", "10", flag, value, env=lake_env)
    assert result.returncode == 1
    assert f"{flag} {value} is out of range: it must be {allowed}" in result.stderr
    with psycopg.connect(lake_env["SOURCE_PG_DSN"]) as conn:  # nothing was written, not even the table
        assert conn.execute("SELECT to_regclass('public.events')").fetchone()[0] is None


def test_after_sigterm_only_the_batches_in_flight_commit(lake_env):
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT

    batch, workers = 2000, 2
    env = {**os.environ, **lake_env}
    proc = subprocess.Popen([sys.executable, str(ROOT / "insert_event_data_loop.py"), "--rows", "400000",
                             "--batch-size", str(batch), "--workers", str(workers), "--quiet"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    with psycopg.connect(lake_env["SOURCE_PG_DSN"], autocommit=True) as conn:
        def count() -> int:
            exists = conn.execute("SELECT to_regclass('public.events')").fetchone()[0]
            return conn.execute("SELECT count(*) FROM events").fetchone()[0] if exists else 0

        deadline = time.monotonic() + 60
        while count() < 3 * batch and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        at_signal = count()
        out, _ = proc.communicate(timeout=60)
        final = count()
    assert proc.returncode == 0, out
    assert 0 < at_signal < 400000
    # each worker may finish the batch it holds; nothing queued behind them starts
    assert final - at_signal <= workers * batch, (at_signal, final)
    assert int(out.strip().splitlines()[-1].split(":")[1].split()[0]) == final
