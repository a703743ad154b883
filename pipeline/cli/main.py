"""``events_pipeline.py``: parse flags, build settings, dispatch, turn errors into plain words."""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys

from pipeline import logs
from pipeline.cli import analysis, output, voice
from pipeline.cli.command import Command, HandlerResult
from pipeline.cli.handlers import ACTIONS, action_word
from pipeline.cli.parser import SETTING_FLAGS, build_parser, refuse_foreign_options, setting_flags
from pipeline.errors import ConfigError, PipelineError, ShutdownRequested
from pipeline.process import exit_quietly_on_broken_pipe, interrupt_command, on_stop, stop_signal
from pipeline.settings import Settings, load_settings

log = logging.getLogger("event-lake")


def entry() -> int:
    """The console script ``event-lake`` and ``events_pipeline.py``: :func:`main`, quiet when the
    reader closes the pipe (``… | head``). A stop request (SIGTERM, Ctrl-C) ends every command with
    its last line; a long-running one installs its own handler to finish what it does first."""
    on_stop(interrupt_command)
    return exit_quietly_on_broken_pipe(main)


def main(argv: list[str] | None = None) -> int:
    try:
        voice.install()  # library messages name this command line's flags
        parser = build_parser()
        words = action_words(sys.argv[1:] if argv is None else argv, parser)
        args = parser.parse_args(negative_values(words))
        logs.setup(args.verbose, args.log_format, quiet=args.quiet)
    except KeyboardInterrupt:  # a stop before the command even read its flags
        return stopped("table")
    clash = args.json and args.format not in (None, "json")
    args.format = args.format or ("json" if args.json else "table")
    args.json = args.format == "json"  # handlers ask args.json; --format json is the same
    machine = args.format != "table"
    settings: Settings | None = None
    try:
        if clash:
            raise ConfigError(f"--json and --format {args.format} ask for two formats.", "Give one of them.")
        refuse_foreign_options(args, parser)
        settings = load_settings(flags=setting_flags(args), spark_conf=args.spark_conf)
        ok, message = dispatch(args, settings)
    except PipelineError as exc:
        if stop_signal() is not None and not isinstance(exc, ConfigError):
            return stopped(args.format)
        output.print_error(exc, fmt=args.format)
        return 1
    except BrokenPipeError:
        raise  # the reader went away (``… | head``): entry() exits quietly
    except KeyboardInterrupt:
        return stopped(args.format)
    except Exception as exc:  # an unexpected failure still ends with a plain last line
        if stop_signal() is not None:  # what the stop cancelled (a Spark job) failed first
            return stopped(args.format)
        where = logs.write_traceback(exc, settings.home if settings else None)
        if args.verbose:
            log.exception("unexpected error")
        output.print_unexpected(exc, where, fmt=args.format)
        return 1
    output.last_line(message, machine=machine)
    if isinstance(ok, bool):
        return 0 if ok else 1
    return ok  # an action's own exit code (--status: 0 healthy, 1 stale, 2 failing)


def stopped(fmt: str) -> int:
    """A command ended by a stop request: said as such (a JSON document with ``--json``), with the
    signal's exit code (130 for Ctrl-C, 143 for SIGTERM)."""
    sig = signal.Signals(stop_signal() or signal.SIGINT)
    said = (f"Stopped by {sig.name}: the work in flight was cancelled and nothing half-done was "
            "committed (a batch already staged stays staged; the next run promotes it).")
    if fmt == "json":
        output.print_error(ShutdownRequested(said, "Run the command again to finish."), fmt=fmt)
    else:
        output.last_line(said, machine=fmt != "table")
    return 128 + sig


# flags whose value may start with "-" (argparse would take "--retention -1d" for two flags and
# print its usage): the value is joined to the flag, so the value gets its own clear error
_VALUE_FLAGS = (*SETTING_FLAGS, "--timeout", "--limit", "--memory", "--param")


def negative_values(argv: list[str]) -> list[str]:
    """``--retention -1d`` -> ``--retention=-1d``."""
    out: list[str] = []
    pending = iter(argv)
    for arg in pending:
        if arg in _VALUE_FLAGS:
            value = next(pending, None)
            if value is not None and re.match(r"^-\d", value):
                out.append(f"{arg}={value}")
                continue
            out.append(arg)
            if value is not None:
                out.append(value)
            continue
        out.append(arg)
    return out


def action_words(argv: list[str], parser: argparse.ArgumentParser | None = None) -> list[str]:
    """``event-lake doctor`` / ``event-lake status --json``: a first word naming an action is that
    action's flag, so the installed tool reads like other CLIs; flags work as before. Another
    first word is an error that suggests the nearest action (``stauts`` -> ``status``)."""
    if argv and not argv[0].startswith("-"):
        words = {action_word(action.flag): action.flag for action in ACTIONS}
        if argv[0] in words:
            return [words[argv[0]], *argv[1:]]
        if parser is not None:
            import difflib

            near = difflib.get_close_matches(argv[0], list(words), n=1)
            parser.error(f"unknown action {argv[0]!r}" + (f"; did you mean {near[0]!r}?" if near else
                                                          f"; actions: {', '.join(words)}"))
    return argv


def dispatch(args: argparse.Namespace, settings: Settings) -> HandlerResult:
    chosen = [action for action in ACTIONS if getattr(args, action.dest)]
    rows_out = args.sql or args.sql_file or (chosen and chosen[0].handler in analysis.ROW_COMMANDS)
    if args.format in ("csv", "jsonl") and not rows_out:
        raise ConfigError(f"--format {args.format} is for commands that return rows: --sql, --sql-file, "
                          "--snapshots, --changes.", "Use --json (or --format json) for this command.")
    if args.sql or args.sql_file:
        if chosen:
            raise ConfigError("--sql/--sql-file cannot be combined with another action.")
        return analysis.sql(Command(args, settings))
    if not chosen:
        raise ConfigError("Nothing to do.", "Give an action such as --run, --demo, --status or --sql; "
                          "see --help.")
    return chosen[0].handler(Command(args, settings))
