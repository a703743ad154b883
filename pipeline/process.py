"""How every long-running command meets its process's edges: the stop signals, and a stdout
whose reader went away. Written once for the pipeline's commands and the generator."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def on_stop(handler: Callable[[], None]) -> None:
    """Call ``handler`` on SIGTERM or SIGINT (Ctrl-C): the command finishes what it is doing and
    ends, instead of dying mid-transaction."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: handler())


def exit_quietly_on_broken_pipe(run: Callable[[], int]) -> int:
    """``run()``, but a closed stdout (``… | head``) ends it with SIGPIPE's code, no traceback."""
    try:
        return run()
    except BrokenPipeError:
        # no traceback, and none when Python flushes stdout at exit; the code SIGPIPE gives
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
