"""SQL text helpers every stage shares: quoting, the statements in ``sql/`` files, and the one
row an aggregate returns.

Identifiers from configuration are validated when settings load; they are still quoted
wherever they are spliced into SQL, by these functions and no others.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Protocol

_PACKAGE = Path(__file__).resolve().parent
# an installed wheel carries sql/ inside the package; a checkout has it at the top level
SQL_DIR = _PACKAGE / "sql" if (_PACKAGE / "sql").is_dir() else _PACKAGE.parent / "sql"


def quote_ident(name: str) -> str:
    """``my"table`` -> ``"my""table"`` (Postgres and DuckDB quote identifiers alike)."""
    return '"' + name.replace('"', '""') + '"'


def quote_if_needed(name: str) -> str:
    """``name`` as a statement a person runs spells it: bare when Postgres reads it so (lower case
    letters, digits, _), else quoted (``Orders`` -> ``"Orders"``)."""
    return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) else quote_ident(name)


def quote_qualified(name: str) -> str:
    """``public.events`` -> ``"public"."events"``."""
    return ".".join(quote_ident(part) for part in name.split("."))


def quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def read_sql(name: str) -> str:
    return (SQL_DIR / name).read_text()


def split_statements(text: str) -> list[str]:
    """Split on ``;`` at line ends, dropping comment-only pieces (our DDL has no ``;`` in strings)."""
    statements = []
    for chunk in text.split(";\n"):
        body = "\n".join(line for line in chunk.splitlines() if not line.strip().startswith("--"))
        if body.strip().rstrip(";"):
            statements.append(body.strip().rstrip(";"))
    return statements


class _Cursor(Protocol):
    def fetchone(self) -> Any: ...


def one_row(cursor: _Cursor) -> tuple[Any, ...]:
    """The row of a statement that always returns one (an aggregate, ``SELECT now()``), from a
    psycopg or DuckDB cursor; no row at all is a bug here, not a result, and says so."""
    row = cursor.fetchone()
    if row is None:
        raise LookupError("a statement that always returns a row returned none")
    return tuple(row)
