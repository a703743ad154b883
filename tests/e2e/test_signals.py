"""Every long-running command stops on a stop signal sent to its whole process group through
``uv run`` (what a terminal's Ctrl-C, ``timeout`` and systemd's default KillMode do: uv forwards
it, so Python gets it twice), once and twice in quick succession: it exits within seconds,
with its documented exit code and last line, and no traceback."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.helpers import Proc, add_events, assert_lake_equals_source
from tests.spark_services import free_port

# command, the line that says it is up, its last line after a clean stop, the exit code
COMMANDS = {
    "serve": (["--serve", "--metrics-port", "{port}"], "Serving the dashboard", "Server stopped.", 0),
    "schedule": (["--schedule", "--run-now", "--engine", "dlt", "--load-every", "1h"], "300 inserted",
                 "Scheduler stopped cleanly.", 0),
    "follow": (["--follow", "--every", "2s", "--metrics-port", "0"], "300 inserted",
               "Stopped following cleanly.", 0),
}
GENERATOR = (["--continuous", "--rows", "200", "--delay", "0.5"], "loop 1: committed", "Generator stopped by signal", 0)


def _stop(proc: Proc, sig: int, times: int, up: str, timeout: float = 180) -> tuple[int, float]:
    proc.wait_for(up, timeout=timeout)
    time.sleep(1.0)
    for _ in range(times):
        proc.signal_group(sig)
        time.sleep(0.2)  # quick succession: the second arrives while the first one is handled
    started = time.monotonic()
    code = proc.popen.wait(60)
    return code, time.monotonic() - started


def _assert_clean(proc: Proc, last: str) -> None:
    out = proc.output
    assert last in out, out[-3000:]
    assert "Traceback" not in out and "Py4J" not in out and "unexpected error" not in out, out[-3000:]
    assert out.count("shutdown requested") <= 1, out[-3000:]


@pytest.mark.parametrize(("command", "sig", "times"), [
    ("serve", signal.SIGTERM, 1), ("serve", signal.SIGINT, 2),
    ("schedule", signal.SIGTERM, 2),
    ("follow", signal.SIGINT, 2),
])
def test_a_long_running_command_stops_on_a_group_signal(lake_env, settings, command, sig, times):
    add_events(settings, 300, seed=11)
    args, up, last, expected = COMMANDS[command]
    proc = Proc("events_pipeline.py", *[a.format(port=free_port()) for a in args], env=lake_env,
                as_users_start_it=True)
    code, seconds = _stop(proc, sig, times, up)
    assert code == expected and seconds < 30, (code, seconds, proc.output[-3000:])
    _assert_clean(proc, last)
    if command in ("schedule", "follow"):
        assert_lake_equals_source(settings, expected_rows=300)


def test_the_generator_stops_on_a_group_signal_sent_twice(lake_env):
    args, up, last, expected = GENERATOR
    proc = Proc("insert_event_data_loop.py", *args, env=lake_env, as_users_start_it=True)
    code, seconds = _stop(proc, signal.SIGINT, 2, up, timeout=60)
    assert code == expected and seconds < 15, (code, seconds, proc.output[-3000:])
    _assert_clean(proc, last)


def test_a_second_request_changes_nothing_and_a_third_ends_the_process_at_once():
    """A command whose stop hangs (a handler that never returns) still ends on the third request;
    the second, one second later, neither blocks nor stops it."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    script = ("import time, pipeline.process as p\n"
              "p.on_stop(lambda: (print('stopping', flush=True), time.sleep(3600)))\n"
              "print('up', flush=True)\n"
              "while True: time.sleep(0.1)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "up"
    for _ in range(2):
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.2)  # separate requests, not one forwarded twice
    assert proc.poll() is None  # the first is being handled, the second changed nothing
    assert proc.stdout.readline().strip() == "stopping"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 128 + signal.SIGTERM


@pytest.fixture
def groups():
    """Process groups a test started: killed at its end, whatever happened (a stuck command must
    not burn a core after the test)."""
    import contextlib
    import os

    started: list[Proc] = []
    yield started
    for proc in started:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.popen.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            proc.popen.wait(10)


def _lingering(home: str, deadline: float = 30) -> list[str]:
    """Processes (the driver JVM, Python workers) that still run with EVENT_LAKE_HOME=``home``, once
    they had ``deadline`` seconds to go: a JVM in a session of its own is outside the group."""
    import psutil

    end = time.monotonic() + deadline
    while True:
        found = []
        for process in psutil.process_iter(["name", "cmdline"]):
            try:
                if process.environ().get("EVENT_LAKE_HOME") == home:
                    found.append(" ".join(process.info["cmdline"] or [])[:120])
            except (psutil.Error, OSError):
                continue
        if not found or time.monotonic() > end:
            return found
        time.sleep(0.3)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_run_stops_mid_extraction_and_the_rerun_is_exact(lake_env, settings, groups, sig):
    """--run through uv run, its group signalled while Spark's slices read: it exits at once with
    the signal's code and says so (was: SIGTERM a silent 143, Ctrl-C ignored for 34-56 s); nothing
    of it is left running; the next run loads every row once."""
    from pipeline.settings.resolve import resolve
    from tests import faults
    from tests.helpers import run, wait_for_slow_reads

    add_events(settings, 300, seed=12)
    proc = Proc("tests/faulty_cli.py", "--run", env={**lake_env, faults.ENV: "slow-read"}, as_users_start_it=True)
    groups.append(proc)
    wait_for_slow_reads(resolve(settings).source_dsn.conninfo())
    proc.signal_group(sig)
    started = time.monotonic()
    code = proc.popen.wait(60)
    seconds = time.monotonic() - started
    assert code == 128 + sig and seconds < 20, (code, seconds, proc.output[-3000:])
    assert f"Stopped by {signal.Signals(sig).name}" in proc.output, proc.output[-3000:]
    assert "Traceback" not in proc.output and "unexpected error" not in proc.output, proc.output[-3000:]
    assert _lingering(lake_env["EVENT_LAKE_HOME"]) == []
    # nor any of its reads in Postgres (they read on for the rest of their 30 s)
    from tests.helpers import slow_reads_left

    assert slow_reads_left(resolve(settings).source_dsn.conninfo()) == 0
    # recorded as stopped, not as a failure carrying the cancelled job's Py4J error
    from tests.helpers import jobs_table, lake_query

    assert lake_query(settings, f"SELECT status, error FROM {jobs_table(settings)} WHERE job = 'load'") == [
        ("cancelled", f"stopped by {signal.Signals(sig).name}")]
    assert run(settings, engine="dlt").rows_inserted == 300
    assert_lake_equals_source(settings, expected_rows=300)


def test_a_sql_query_stops_on_ctrl_c_and_leaves_nothing_running(lake_env, settings, groups):
    """A long --sql (a cross join with no end in sight) stops on Ctrl-C sent to its group as soon
    as it is running: the query is interrupted, the command says so and exits 130."""
    import psutil

    from tests.helpers import run

    add_events(settings, 50, seed=13)
    run(settings, engine="dlt")
    proc = Proc("events_pipeline.py", "--sql", "SELECT count(*) FROM range(100000000000) a, range(10) b "
                "WHERE a.range % 7 = b.range", "--timeout", "0", env=lake_env, as_users_start_it=True)
    groups.append(proc)
    tree = psutil.Process(proc.popen.pid)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # running: the tree has burnt a second of CPU beyond its start
        busy = sum(sum(p.cpu_times()[:2]) for p in [tree, *tree.children(recursive=True)] if p.is_running())
        if busy > 4.0:
            break
        time.sleep(0.2)
    proc.signal_group(signal.SIGINT)
    started = time.monotonic()
    code = proc.popen.wait(60)
    assert code == 130 and time.monotonic() - started < 15, (code, proc.output[-2000:])
    assert "Stopped by SIGINT" in proc.output and "Traceback" not in proc.output, proc.output[-2000:]
    assert _lingering(lake_env["EVENT_LAKE_HOME"]) == []


def test_a_driver_jvm_killed_mid_extraction_is_named_as_spark_not_the_source(lake_env, settings, groups):
    """A dead driver JVM during the slice reads was reported as "Lost the source Postgres" with two
    tracebacks while the source was up: it is the engine, and the message says so."""
    import psutil

    from pipeline.settings.resolve import resolve
    from tests import faults
    from tests.helpers import wait_for_slow_reads

    add_events(settings, 100, seed=14)
    proc = Proc("tests/faulty_cli.py", "--run", env={**lake_env, faults.ENV: "slow-read"}, as_users_start_it=True)
    groups.append(proc)
    wait_for_slow_reads(resolve(settings).source_dsn.conninfo())
    home = lake_env["EVENT_LAKE_HOME"]
    jvms = [p for p in psutil.process_iter(["name"]) if p.info["name"] == "java"
            and _environ(p).get("EVENT_LAKE_HOME") == home]
    assert jvms, "no driver JVM found"
    for jvm in jvms:
        jvm.kill()
    code = proc.popen.wait(120)
    out = proc.output
    assert code == 1, out[-3000:]
    assert "driver process went away" in out and "Lost the source" not in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]


def _environ(process) -> dict[str, str]:
    import psutil

    try:
        return process.environ()
    except (psutil.Error, OSError):
        return {}


def _catches(pid: int, sig: int) -> bool:
    """Has process ``pid`` installed a handler for ``sig`` (its SigCgt mask in /proc)?"""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask & (1 << (sig - 1)))


@pytest.mark.parametrize(("args", "sig"), [
    (["--sql", "SELECT count(*) FROM range(20000000000) t(x) WHERE x % 7 = 3", "--timeout", "0"], signal.SIGTERM),
    (["--sql", "SELECT count(*) FROM range(20000000000) t(x) WHERE x % 7 = 3", "--timeout", "0"], signal.SIGINT),
    (["--run", "--engine", "dlt"], signal.SIGINT),
    (["--verify"], signal.SIGTERM),
])
def test_a_stop_in_a_commands_first_second_is_not_lost(lake_env, settings, args, sig):
    """Signalled the moment its stop handler is in place (long before it opened the lake): the
    stop was lost, the command ran to its end (a 56 s query) and exited 0. Now it stops there,
    with the signal's code and its last line; a stopped load leaves the lake exact for the next."""
    from tests.helpers import run

    add_events(settings, 400, seed=14)
    proc = Proc("events_pipeline.py", *args, env=lake_env)  # this very process: its handlers are read
    try:
        deadline = time.monotonic() + 60
        # SIGTERM caught: the command's own handler is in place, for SIGINT too (Python catches SIGINT
        # from its start, and one inside the interpreter's own startup is a fatal error of Python's)
        while not _catches(proc.popen.pid, signal.SIGTERM) and time.monotonic() < deadline \
                and proc.popen.poll() is None:
            time.sleep(0.005)
        proc.popen.send_signal(sig)
        started = time.monotonic()
        code = proc.popen.wait(60)
    finally:
        if proc.popen.poll() is None:
            proc.popen.kill()
            proc.popen.wait()
    assert code == 128 + sig and time.monotonic() - started < 15, (code, proc.output[-2000:])
    assert proc.lines[-1].startswith((f"Stopped by {signal.Signals(sig).name}",
                                      "Stopped before the command started")), proc.output[-2000:]
    assert "Traceback" not in proc.output
    run(settings, engine="dlt")
    assert_lake_equals_source(settings, expected_rows=400)
