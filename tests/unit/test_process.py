"""The stop signals' handling (pipeline.process), in a process of its own: handlers and hooks are
the process's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT

# a stop request whose interruption of the main thread lands inside a weakref callback, as it does
# when it comes while an import releases its module lock: Python cannot raise there
_LANDS_IN_A_CALLBACK = textwrap.dedent("""
    import signal, time, weakref
    from pipeline import process

    process.on_stop(process.interrupt_command)
    process._installed.signum = signal.SIGINT  # a stop was requested

    def callback(_ref):
        process._interrupt.append(True)  # what interrupt_command asks of the handler
        process._installed.on_signal(signal.SIGINT, None)  # raises KeyboardInterrupt, here

    class Lock: pass
    lock = Lock()
    ref = weakref.ref(lock, callback)
    try:
        del lock
        for _ in range(2000):
            time.sleep(0.001)
        print("ran on")
    except KeyboardInterrupt:
        print("stopped")
""")


def test_a_stop_met_inside_a_callback_stops_the_command_with_no_traceback():
    """The stop was printed as "Exception ignored … Traceback" on the user's terminal (a flaky
    failure of test_a_stop_in_a_commands_first_second_is_not_lost) and went no further; it is raised
    again once the callback returns."""
    result = subprocess.run([sys.executable, "-c", _LANDS_IN_A_CALLBACK], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.stdout.strip() == "stopped", result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr


def test_a_command_that_left_a_thread_in_native_code_ends_with_its_code_and_its_output():
    """A scheduler that stopped cleanly but left a status refresh inside DuckDB died in Python's
    finalization (``terminate called without an active exception``, exit -6): such a command's
    process ends without it, its output flushed and its own exit code kept."""
    code = ("import threading, time\nfrom pipeline import process\n"
            "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
            "print('Scheduler stopped cleanly.', end='')\nprocess.native_work_left()\nprocess.end(0)\n"
            "raise SystemExit(9)  # not reached\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "Scheduler stopped cleanly."), done
    untouched = subprocess.run([sys.executable, "-c", "from pipeline import process\nprocess.end(0)\n"
                                "raise SystemExit(9)"], capture_output=True, text=True, timeout=60)
    assert untouched.returncode == 9, untouched  # nothing left running: Python's own exit
