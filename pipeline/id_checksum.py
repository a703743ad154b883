"""Which ids a time range holds, summarised so that source and lake compare without moving the ids.

Counts cannot see identity: a row deleted in the source and a backfilled row in the same range
leave the count unchanged. So each side sums a 64-bit value of every id in the range (the XOR of
the UUID's two halves, modulo 2**64): an order-independent checksum both Postgres and DuckDB compute
from the id's own bytes, with no hash function the other lacks. The count stays beside it. Equal
(count, checksum) pairs mean equal id sets but for a deliberate collision; a difference is then
located bucket by bucket (a minute in a run's check, an hour in ``--reconcile``) and, in the
buckets that differ, id by id.

Pure SQL text and arithmetic: :mod:`pipeline.source.stats` and :mod:`pipeline.lake.batches` run it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import SupportsInt
from uuid import UUID

MODULUS = 2 ** 64

# the id's value in Postgres, from a uuid-typed expression: its two 8-byte halves as bigints, XORed
_PG_HALF = "('x' || encode(substring(uuid_send({id}) from {start} for 8), 'hex'))::bit(64)::bigint"
# a text id is a UUID in any spelling the lake's validation takes (see pipeline.lake.validate)
# (braces as \x7b and \x7d: the text goes into psycopg's sql.SQL templates, where braces are fields;
# the counts are written out for the same reason)
_PG_UUID_TEXT = r"'^\s*\x7b?" + "-?".join(r"[0-9a-f]" * n for n in (8, 4, 4, 4, 12)) + r"\x7d?\s*$'"
# the same value in DuckDB, from a UUID-typed expression (its text is 32 hex digits and 4 hyphens)
_DUCK_VALUE = ("xor(('0x' || substr(replace(CAST({id} AS VARCHAR), '-', ''), 1, 16))::UBIGINT, "
               "('0x' || substr(replace(CAST({id} AS VARCHAR), '-', ''), 17, 16))::UBIGINT)::HUGEINT")


@dataclass(frozen=True)
class IdSum:
    """How many ids a range holds and their checksum (0 for none)."""

    count: int = 0
    checksum: int = 0

    @classmethod
    def of(cls, count: SupportsInt | None, total: SupportsInt | None) -> IdSum:
        """From a query's (count, sum of values): the sum is reduced modulo 2**64."""
        return cls(int(count or 0), int(total or 0) % MODULUS)

    def __add__(self, other: IdSum) -> IdSum:
        return IdSum(self.count + other.count, (self.checksum + other.checksum) % MODULUS)

    def __sub__(self, other: IdSum) -> IdSum:
        return IdSum(self.count - other.count, (self.checksum - other.checksum) % MODULUS)

    def as_dict(self) -> dict[str, int]:
        return {"count": self.count, "checksum": self.checksum}


def of_ids(ids: Iterable[UUID]) -> IdSum:
    """The same (count, checksum) computed here, for ids already in hand."""
    values = [int.from_bytes(i.bytes[:8]) ^ int.from_bytes(i.bytes[8:]) for i in ids]
    return IdSum.of(len(values), sum(values))


def postgres_id(column: str, uuid_typed: bool) -> str:
    """``column`` as a uuid in Postgres: itself, or a text spelling of one (NULL when it spells none)."""
    if uuid_typed:
        return column
    return f"(CASE WHEN {column}::text ~* {_PG_UUID_TEXT} THEN trim({column}::text)::uuid END)"


def postgres_value(uuid_sql: str) -> str:
    return f"({_PG_HALF.format(id=uuid_sql, start=1)} # {_PG_HALF.format(id=uuid_sql, start=9)})"


def duckdb_value(uuid_sql: str) -> str:
    return _DUCK_VALUE.format(id=uuid_sql)


def postgres_bucket(seconds: int) -> str:
    """The bucket a source row falls in: whole ``seconds`` since the epoch, UTC (a naive column is
    wall-clock time in the session's zone, which ``::timestamptz`` applies)."""
    return f"floor(extract(epoch FROM event_timestamp::timestamptz) / {seconds})::bigint"


def duckdb_bucket(seconds: int) -> str:
    return f"(epoch_us(event_timestamp) // {seconds * 1_000_000})"


def bucket_start(bucket: int, seconds: int) -> datetime:
    return datetime.fromtimestamp(0, UTC) + timedelta(seconds=bucket * seconds)


def differing(source: dict[int, IdSum], lake: dict[int, IdSum]) -> list[int]:
    """Buckets whose id sets differ (pure)."""
    return sorted(b for b in source.keys() | lake.keys() if source.get(b, IdSum()) != lake.get(b, IdSum()))
