"""Compare the lake with the source: counts, distinct ids and an order-independent checksum.

The source is read through DuckDB's postgres extension in the same session as the lake,
so both sides are hashed by the same function over the same canonical text forms.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

from pipeline.lake import extensions
from pipeline.lake.attach_sql import postgres_secret_sql
from pipeline.lake.connect import connect
from pipeline.settings import ResolvedSettings
from pipeline.sqltext import quote_qualified

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


def attach_source(con: duckdb.DuckDBPyConnection, settings: ResolvedSettings, alias: str = "src") -> None:
    """Attach the source Postgres read-only as ``alias`` (credentials in a secret)."""
    extensions.load(con, "postgres")
    con.execute(postgres_secret_sql(f"{alias}_secret", settings.source_dsn, show_secrets=True))
    con.execute(f"ATTACH '' AS {alias} (TYPE postgres, SECRET {alias}_secret, READ_ONLY)")


def fingerprint(con: duckdb.DuckDBPyConnection, relation: str,
                upper: datetime | None = None) -> Fingerprint:
    where = "WHERE event_timestamp <= $upper" if upper else ""
    params = {"upper": upper} if upper else {}
    rows, ids, checksum = con.execute(
        _FINGERPRINT.format(relation=relation, where=where), params).fetchone()
    return Fingerprint(int(rows), int(ids), int(checksum))


def compare(settings: ResolvedSettings, upper: datetime | None = None) -> Comparison:
    """Fingerprint lake and source (optionally only events up to ``upper``)."""
    con = connect(settings, read_only=True)
    try:
        attach_source(con, settings)
        source_relation = f"src.{quote_qualified(settings.source_table)}"
        return Comparison(lake=fingerprint(con, settings.events_table, upper),
                          source=fingerprint(con, source_relation, upper))
    finally:
        con.close()
