"""Read the SQL files under ``sql/`` and split them into statements."""

from __future__ import annotations

from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"


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
