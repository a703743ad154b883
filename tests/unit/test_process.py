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
