"""Compare the lake with the source: counts, distinct ids and an order-independent checksum.

The source is read through DuckDB's postgres extension in the same session as the lake,
so both sides are hashed by the same function over the same canonical text forms.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

from pipeline import extensions, lake
from pipeline.attach import quote_literal
from pipeline.config import Settings

_FINGERPRINT = """
    SELECT count(*) AS rows, count(DISTINCT event_id) AS ids,
           coalesce(sum(hash(event_id::VARCHAR, event_type, epoch_us(event_timestamp),
                             details::VARCHAR, epoch_us(created_at))), 0) AS checksum
    FROM {relation} {where}
"""


@dataclass(frozen=True)
class Fingerprint:
    rows: int
    ids: int
    checksum: int


@dataclass(frozen=True)
class Comparison:
    lake: Fingerprint
    source: Fingerprint

    @property
    def equal(self) -> bool:
        return self.lake == self.source

    def describe(self) -> str:
        verdict = "lake == source" if self.equal else "LAKE DIFFERS FROM SOURCE"
        return (f"{verdict}: lake {self.lake.rows} rows / {self.lake.ids} ids, source "
                f"{self.source.rows} rows / {self.source.ids} ids, checksums "
                f"{'match' if self.lake.checksum == self.source.checksum else 'differ'}")


def attach_source(con: duckdb.DuckDBPyConnection, settings: Settings, alias: str = "src") -> None:
    """Attach the source Postgres read-only as ``alias`` (credentials in a secret)."""
    dsn = settings.source_dsn
    assert dsn is not None
    extensions.load(con, "postgres")
    con.execute(
        f"CREATE OR REPLACE SECRET {alias}_secret (TYPE postgres, HOST {quote_literal(dsn.host)}, "
        f"PORT {dsn.port}, DATABASE {quote_literal(dsn.dbname)}, USER {quote_literal(dsn.user)}, "
        f"PASSWORD {quote_literal(dsn.password.reveal())})")
    con.execute(f"ATTACH '' AS {alias} (TYPE postgres, SECRET {alias}_secret, READ_ONLY)")


def fingerprint(con: duckdb.DuckDBPyConnection, relation: str,
                upper: datetime | None = None) -> Fingerprint:
    where = "WHERE event_timestamp <= $upper" if upper else ""
    params = {"upper": upper} if upper else {}
    rows, ids, checksum = con.execute(
        _FINGERPRINT.format(relation=relation, where=where), params).fetchone()
    return Fingerprint(int(rows), int(ids), int(checksum))


def compare(settings: Settings, upper: datetime | None = None) -> Comparison:
    """Fingerprint lake and source (optionally only events up to ``upper``)."""
    con = lake.connect(settings, read_only=True)
    try:
        attach_source(con, settings)
        source_relation = f'src."{settings.source_schema_name}"."{settings.source_table_name}"'
        return Comparison(lake=fingerprint(con, settings.events_table, upper),
                          source=fingerprint(con, source_relation, upper))
    finally:
        con.close()
