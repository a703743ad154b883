"""The pipeline's command line: actions from :data:`~pipeline.cli.handlers.ACTIONS`, then options.

Defaults shown in the help come from :mod:`pipeline.settings.keys`, the same place the
settings loader takes them from.
"""

from __future__ import annotations

import argparse

from pipeline import invocation
from pipeline.cli import docs_links
from pipeline.cli.analysis import SQL_TIMEOUT
from pipeline.cli.handlers import ACTIONS, action_word, dest
from pipeline.extract.engines import ENGINES
from pipeline.settings.keys import default
from pipeline.settings.platform import default_home
from pipeline.version import __version__

# flag -> the environment key it overrides (read by pipeline.settings.load_settings)
SETTING_FLAGS = {"--lookback": "LOOKBACK", "--load-every": "LOAD_EVERY", "--every": "FOLLOW_EVERY",
                 "--expire-every": "EXPIRE_EVERY",
                 "--compact-every": "COMPACT_EVERY", "--retention": "RETENTION",
                 "--reconcile-every": "RECONCILE_EVERY", "--since": "RECONCILE_SINCE",
                 "--metrics-port": "METRICS_PORT", "--memory": "SQL_MEMORY",
                 "--tables": "SOURCE_TABLES", "--leave-image": "LEAVE_IMAGE"}



# an option that belongs to some commands -> those commands; given with another, it is refused before
# anything runs (`--run --at-version 3` ran a load and ignored the version). Setting flags (--lookback,
# --retention, --metrics-port, …) are settings: every command reads them.
_SQL_SESSION = ("--sql", "--sql-file", "--snapshots", "--changes")
_LONG_RUNNING = ("--schedule", "--follow")
OPTION_OWNERS: dict[str, tuple[str, ...]] = {
    "--at-version": _SQL_SESSION, "--at-time": _SQL_SESSION, "--limit": _SQL_SESSION,
    "--timeout": _SQL_SESSION, "--memory": _SQL_SESSION, "--param": ("--sql", "--sql-file"),
    "--write": ("--sql", "--sql-file", "--print-attach"), "--show-secrets": ("--print-attach",),
    "--table": ("--changes",), "--dry-run": ("--maintain", "--erase"), "--yes": ("--erase",),
    "--run-now": ("--schedule",),
    "--every": ("--follow",), "--since": ("--verify", "--repair", "--reconcile", *_LONG_RUNNING),
}


def build_parser() -> argparse.ArgumentParser:
    prog = invocation.pipeline_command()
    words = ", ".join(action_word(action.flag) for action in ACTIONS)
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Move events from Postgres into a DuckLake with time travel. With no "
        f"configuration everything runs on an embedded Postgres under {default_home()}.",
        epilog=f"Every action also works as a word (`{prog} status --json` is `{prog} --status --json`): "
        f"{words}. Settings come from the environment and .env (every key is in "
        f"{docs_links.readable(docs_links.SETTINGS)}"
        f"{'' if invocation.installed() else ' and .env.example'}); flags override.",
    )
    group = parser.add_mutually_exclusive_group()
    for action in ACTIONS:
        if action.metavar:
            group.add_argument(action.flag, nargs=len(action.metavar), metavar=action.metavar,
                               help=action.help)
        else:
            group.add_argument(action.flag, action="store_true", help=action.help)
    sql = parser.add_argument_group("ad-hoc SQL (read-only unless --write)")
    sql.add_argument("--sql", action="append", metavar="SQL",
                     help="SQL to run; repeatable, run in order in one session.")
    sql.add_argument("--sql-file", action="append", metavar="FILE",
                     help="File of SQL statements (e.g. sql/analysis/*.sql); repeatable.")
    sql.add_argument("--param", action="append", metavar="NAME=VALUE",
                     help="Value for $NAME in the SQL; repeatable.")
    sql.add_argument("--at-version", type=int, metavar="N",
                     help="Read the whole session at snapshot N (time travel).")
    sql.add_argument("--at-time", metavar="TS",
                     help="Read the whole session as of timestamp TS, e.g. '2026-11-21 10:00:00+00'.")
    sql.add_argument("--table", help="With --changes: schema.table (default: the one table loaded; with "
                     "several tables, required).")
    sql.add_argument("--limit", type=int, help="Rows shown per command (default 100 as text, "
                     "all as JSON); row_count is always the true count, counted without keeping the rest.")
    sql.add_argument("--timeout", metavar="DURATION",
                     help=f"Stop the session when it runs longer (default {SQL_TIMEOUT}; 0 for no limit).")
    sql.add_argument("--memory", metavar="SIZE",
                     help=f"Memory the session may use before it spills to a private temp folder (env "
                     f"SQL_MEMORY, default {default('SQL_MEMORY')}); a query that cannot spill stops with "
                     "a message.")
    sql.add_argument("--write", action="store_true",
                     help="Allow statements that change the lake (otherwise it is attached read-only).")
    parser.add_argument("--engine", choices=ENGINES, default="spark",
                        help="Extraction engine (default spark).")
    parser.add_argument("--lookback", help=f"Override LOOKBACK, e.g. {default('LOOKBACK')}.")
    parser.add_argument("--tables", metavar="TABLES",
                        help="Load several source tables as one image (one snapshot, one commit): "
                        "schema.table(time=…, id=…, subject=…) or schema.table[:time_column[:id_column]],… "
                        "(overrides SOURCE_TABLES).")
    parser.add_argument("--leave-image", action="store_const", const="true",
                        help="Load the listed tables although one was last loaded as one image with a table "
                        "not listed, leaving that image on purpose (env LEAVE_IMAGE).")
    parser.add_argument("--json", action="store_true",
                        help="Machine-readable output: stdout holds one JSON document, logs go to stderr.")
    parser.add_argument("--format", choices=("table", "json", "csv", "jsonl"),
                        help="Output format (default table; json is --json; csv and jsonl print the rows "
                        "of SQL commands, --snapshots and --changes).")
    parser.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="Log lines on stderr: text (default) or one JSON object per line for log "
                        "shippers.")
    parser.add_argument("--quiet", action="store_true",
                        help="Only warnings and errors on stderr, and no progress lines.")
    parser.add_argument("--spark-conf", action="append", metavar="KEY=VALUE",
                        help="A Spark property for this run (repeatable; adds to or overrides SPARK_CONF), "
                        "e.g. spark.executor.memory=4g.")
    timing = parser.add_argument_group("scheduling and maintenance (units s, m, h, d, w)")
    for flag, what in (("--load-every", "Load interval"),
                       ("--every", "With --follow: a load starts this often"),
                       ("--expire-every", "Snapshot expiry interval"),
                       ("--compact-every", "Compaction interval"),
                       ("--retention", "Keep snapshots this long for time travel"),
                       ("--reconcile-every", "Reconcile interval"),
                       ("--since", "With --reconcile: compare source and lake this far back")):
        key = SETTING_FLAGS[flag]
        timing.add_argument(flag, help=f"{what} (env {key}, default {default(key)}).")
    timing.add_argument("--metrics-port", help="Port of /metrics, /healthz and the dashboard (env "
                        f"METRICS_PORT, default {default('METRICS_PORT')}; 0: the scheduler serves none).")
    timing.add_argument("--run-now", action="store_true", help="With --schedule: load at start.")
    timing.add_argument("--dry-run", action="store_true",
                        help="With --maintain: show what would be expired, merged and deleted; with --erase: "
                        "what would be erased and which snapshots' time travel would be lost.")
    timing.add_argument("--yes", action="store_true", help="With --erase: do not ask first.")
    parser.add_argument("--show-secrets", action="store_true",
                        help="With --print-attach: print real credentials instead of ***.")
    parser.add_argument("--verbose", action="store_true", help="Debug logging.")
    parser.add_argument("--version", action="version", version=f"event-lake {__version__}")
    return parser


def refuse_foreign_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """An option given with a command it does not belong to is a ConfigError naming both (before
    anything runs: it would be ignored, and the command would do what was not asked)."""
    from pipeline.errors import ConfigError

    commands = [action.flag for action in ACTIONS if getattr(args, action.dest)]
    commands += [flag for flag in ("--sql", "--sql-file") if getattr(args, dest(flag))]
    if not commands:
        return  # nothing asked: the dispatcher says so
    for option, owners in OPTION_OWNERS.items():
        name = dest(option)
        if getattr(args, name) == parser.get_default(name):
            continue
        foreign = [command for command in commands if command not in owners]
        if foreign:
            raise ConfigError(f"{option} belongs to {', '.join(owners)}, not {foreign[0]}: nothing was run.",
                              f"Drop {option}, or give it with {owners[0]}.")


def setting_flags(args: argparse.Namespace) -> dict[str, tuple[str, str | None]]:
    """The flags that override settings, as ``load_settings(flags=…)`` takes them."""
    return {key: (flag, getattr(args, dest(flag))) for flag, key in SETTING_FLAGS.items()}
