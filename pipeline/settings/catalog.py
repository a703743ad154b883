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

# the role the embedded default's read-only SQL sessions read its catalog with
EMBEDDED_READER = "event_lake_reader"

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
    # the role a read-only SQL session reads a Postgres catalog with (DUCKLAKE_CATALOG_READER;
    # the embedded default's own); None: the session falls back to ``pg``'s role
    reader: PgDsn | None = None
    embedded: bool = False

    @classmethod
    def embedded_default(cls, dsn: PgDsn) -> CatalogSpec:
        """The embedded server's catalog, read by a role of its own (trust auth, no password)."""
        reader = PgDsn(params={**dsn.params, "user": EMBEDDED_READER})
        return cls(kind="postgres", pg=dsn, reader=reader, embedded=True)

    def with_reader(self, text: str, what: str = "DUCKLAKE_CATALOG_READER") -> CatalogSpec:
        """This catalog read, in read-only sessions, as the role ``text`` logs in as: the same
        server and database as the catalog, another role."""
        if self.pg is None:
            raise ConfigError(f"{what} is set, but DUCKLAKE_CATALOG is a {self.kind} file: a reader role "
                              "is for a Postgres catalog (a file catalog is opened read-only as it is).",
                              f"Remove {what}.")
        reader = PgDsn.parse(text, what)
        if (reader.host, reader.port, reader.dbname) != (self.pg.host, self.pg.port, self.pg.dbname):
            # either one may hold the typo: name both, blame neither
            differ = [f"{part} {mine!r} against {theirs!r}" for part, mine, theirs in (
                ("host", self.pg.host, reader.host), ("port", self.pg.port, reader.port),
                ("database", self.pg.dbname, reader.dbname)) if mine != theirs]
            raise ConfigError(f"DUCKLAKE_CATALOG and {what} name different catalogs ({', '.join(differ)}): "
                              f"the reader role must read the catalog DUCKLAKE_CATALOG writes "
                              f"({self.pg.host}:{self.pg.port}/{self.pg.dbname}; {what}: {reader}).",
                              "Fix whichever of the two is misspelled: both name the same host, port and "
                              "database (the reader logs in as a role of its own).")
        if reader.user == self.pg.user:
            raise ConfigError(f"{what} logs in as {reader.user!r}, the role DUCKLAKE_CATALOG writes with.",
                              f"Create a role that can only read (event-lake --doctor prints the GRANTs) "
                              f"and put its name in {what}.")
        return CatalogSpec(kind=self.kind, pg=self.pg, path=self.path, reader=reader)

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
