"""Which database holds the DuckLake catalog, parsed from ``DUCKLAKE_CATALOG``.

Accepted forms: ``postgresql://…`` URLs and libpq ``key=value`` strings (many writers),
``sqlite:PATH`` and ``duckdb:PATH`` (one writer at a time).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pipeline.errors import ConfigError
from pipeline.settings.pgdsn import PgDsn, mask_dsn_text

CatalogKind = Literal["postgres", "sqlite", "duckdb"]

ACCEPTED_FORMS = (
    "postgresql://user:password@host:5432/dbname, 'host=… dbname=… user=…', "
    "sqlite:path/to/catalog.sqlite or duckdb:path/to/catalog.ducklake"
)


@dataclass(frozen=True)
class CatalogSpec:
    """A parsed catalog location: a Postgres DSN or a file path."""

    kind: CatalogKind
    pg: PgDsn | None = None
    path: Path | None = None

    @classmethod
    def parse(cls, text: str) -> CatalogSpec:
        value = (text or "").strip()
        lowered = value.lower()
        if lowered.startswith(("postgresql://", "postgres://")) or (
            "=" in value and not lowered.startswith(("sqlite:", "duckdb:"))
        ):
            return cls(kind="postgres", pg=PgDsn.parse(value, "DUCKLAKE_CATALOG"))
        for prefix in ("sqlite:", "duckdb:"):
            if lowered.startswith(prefix):
                path = value[len(prefix) :].removeprefix("//")
                if not path:
                    raise ConfigError(f"DUCKLAKE_CATALOG {value!r} names no file; accepted forms: "
                                      f"{ACCEPTED_FORMS}.", "Add the catalog file's path after the colon.")
                return cls(kind=prefix[:-1], path=Path(path).expanduser())  # type: ignore[arg-type]
        raise ConfigError(
            f"DUCKLAKE_CATALOG {mask_dsn_text(value)!r} is not a catalog this pipeline understands; "
            f"accepted forms: {ACCEPTED_FORMS}.", "Fix DUCKLAKE_CATALOG in the environment or .env.")

    def describe(self) -> str:
        """Where the catalog is, safe to print."""
        return f"postgres {self.pg}" if self.pg else f"{self.kind} {self.path}"
