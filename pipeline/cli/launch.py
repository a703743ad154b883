"""The first code of ``event-lake`` and ``events_pipeline.py``: the stop handler goes in before
anything heavy is imported, so a stop request from the first instant on ends the command with its
last line and the signal's exit code — not Python's defaults (SIGTERM: a silent 143; Ctrl-C: a
traceback from inside an import). Only the standard library and :mod:`pipeline.process` load
before it."""

from __future__ import annotations

from pipeline.process import command_ended, end, interrupt_command, on_stop, stop_signal

BEFORE_START = "Stopped before the command started; nothing was done."


def entry() -> int:
    on_stop(interrupt_command)
    try:
        from pipeline.cli.main import entry as command
    except KeyboardInterrupt:
        print(BEFORE_START, flush=True)
        return 128 + (stop_signal() or 2)
    try:
        code = command()
    except KeyboardInterrupt:  # a stop's interruption landed as the command returned: it is over
        code = 128 + (stop_signal() or 2)
    finally:
        command_ended()
    end(code)
    return code
