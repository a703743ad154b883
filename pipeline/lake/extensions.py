"""Load DuckDB extensions from their pinned Python wheels, never from the network.

``duckdb-extension-<name>`` wheels carry the extension binary built for the exact DuckDB
version we pin; ``duckdb_extensions.import_extension`` installs it into DuckDB's extension
directory (the one the ``duckdb`` CLI of the same version also reads) on first use.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import duckdb
import fasteners
from duckdb_extensions import import_extension

from pipeline.errors import TerminalError

# wheel name -> name DuckDB lists it under in duckdb_extensions()
CANONICAL = {"postgres": "postgres_scanner", "sqlite": "sqlite_scanner",
             "ducklake": "ducklake", "httpfs": "httpfs"}
# installs take turns across processes; per user, as DuckDB's extension folder (~/.duckdb) is
_INSTALL_LOCK = Path(tempfile.gettempdir()) / f"event-lake-duckdb-{duckdb.__version__}-{os.getuid()}.lock"
# extensions this process has loaded with DuckDB's signature check (see new_instance)
_checked: set[str] = set()
_checked_lock = threading.Lock()


def new_instance(*names: str, own_sql: bool = False) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB instance with the extensions in ``names`` loaded.

    DuckDB checks an extension's signature at every LOAD, in every instance: it hashes the whole
    file (~40 MB each for ducklake and postgres_scanner, ~75 ms each), which was most of what
    opening a lake cost. The code an instance runs, though, is the library the process mapped at
    its first LOAD: DuckDB never unloads it, and the dynamic loader hands every later load of the
    same path that mapped library. So an instance that runs only this program's SQL (``own_sql``:
    the lake sessions, never a ``--sql`` session) loads extensions this process has already
    checked without checking them again; anything else, and every user's session, is checked.
    Such an instance autoloads nothing: what it uses is loaded here, by name."""
    names = tuple(dict.fromkeys(names))
    with _checked_lock:
        reuse = own_sql and all(CANONICAL[name] in _checked for name in names)
    con = duckdb.connect(config={"allow_unsigned_extensions": True} if reuse else {})
    try:
        if own_sql:
            # one thread: the pipeline's statements are catalog reads and small windows, for which a
            # second thread only costs CPU (2 cores, 4 warm loads of 500 new rows, 3 alternating pairs:
            # 1.4-2.3 against 2.2-3.0 CPU s of the process, 5.0-11.1 against 10.6-12.6 s). What scans
            # much asks for every core (Lake.all_cores); a --sql session keeps DuckDB's default
            con.execute(f"SET autoload_known_extensions = false; SET threads = {OWN_SQL_THREADS}")
        load(con, *names)
    except BaseException:
        con.close()
        raise
    if not reuse:
        with _checked_lock:
            _checked.update(CANONICAL[name] for name in names)
    return con


OWN_SQL_THREADS = 1


def load(con: duckdb.DuckDBPyConnection, *names: str) -> None:
    """Install (from the wheel, once) and load each extension in ``names``.

    LOAD is tried first (loading a loaded extension is a no-op): asking duckdb_extensions()
    first cost every lake session a query for what one failed LOAD says."""
    con.execute("SET autoinstall_known_extensions = false")
    for name in names:
        canonical = CANONICAL[name]
        try:
            con.execute(f"LOAD {canonical}")
            continue
        except duckdb.IOException:  # not installed yet, or another process installing it right now
            pass
        # DuckDB's INSTALL replaces the file: two processes installing at once (the first run on
        # a machine, the tests' workers) can each find it gone for a moment, so one at a time
        with fasteners.InterProcessLock(str(_INSTALL_LOCK)):
            _install(con, name)
            con.execute(f"LOAD {canonical}")


def _install(con: duckdb.DuckDBPyConnection, name: str) -> None:
    try:
        import_extension(name, con=con)
    except ImportError:
        raise TerminalError(f"The DuckDB extension wheel duckdb-extension-{name} is not installed.",
                            "Run `uv sync`; the extension wheels are pinned in pyproject.toml.") from None
    except duckdb.Error as exc:
        raise TerminalError(
            f"duckdb-extension-{name} does not match duckdb {duckdb.__version__}: {exc}",
            "Pin duckdb and every duckdb-extension-* wheel to the same version, then `uv sync`.",
        ) from None
