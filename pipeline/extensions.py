"""Load DuckDB extensions from their pinned Python wheels, never from the network.

``duckdb-extension-<name>`` wheels carry the extension binary built for the exact DuckDB
version we pin; the first use installs it into DuckDB's extension directory (the same
one the ``duckdb`` CLI uses), later uses just LOAD it.
"""

from __future__ import annotations

import duckdb

from pipeline.errors import TerminalError

# wheel name -> name DuckDB lists it under in duckdb_extensions()
_CANONICAL = {"postgres": "postgres_scanner", "sqlite": "sqlite_scanner",
              "ducklake": "ducklake", "httpfs": "httpfs"}


def wheel_extension_path(name: str) -> str:
    """Path of the extension binary inside its wheel, for ``INSTALL '<path>'``."""
    import importlib
    from pathlib import Path

    try:
        module = importlib.import_module(f"duckdb_extension_{name}")
    except ImportError:
        raise TerminalError(
            f"The DuckDB extension wheel duckdb-extension-{name} is not installed.",
            "Run `uv sync`; the extension wheels are pinned in pyproject.toml.",
        ) from None
    path = Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.exists():
        raise TerminalError(
            f"duckdb-extension-{name} does not match duckdb {duckdb.__version__} (no {path}).",
            "Pin duckdb and every duckdb-extension-* wheel to the same version, then `uv sync`.",
        )
    return str(path)


def load(con: duckdb.DuckDBPyConnection, *names: str) -> None:
    """Install (from the wheel, once) and load each extension in ``names``."""
    con.execute("SET autoinstall_known_extensions = false")
    wanted = {_CANONICAL[n]: n for n in names}
    rows = con.execute(
        "SELECT extension_name, installed, loaded FROM duckdb_extensions() "
        "WHERE extension_name IN (SELECT unnest(?))",
        [list(wanted)],
    ).fetchall()
    state = {name: (installed, loaded) for name, installed, loaded in rows}
    for canonical, name in wanted.items():
        installed, loaded = state.get(canonical, (False, False))
        if loaded:
            continue
        if not installed:
            con.execute(f"INSTALL '{wheel_extension_path(name)}'")
        con.execute(f"LOAD {canonical}")
