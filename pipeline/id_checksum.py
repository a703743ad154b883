"""Which ids a time range holds, summarised so that source and lake compare without moving the ids.

Counts cannot see identity: a row deleted in the source and a backfilled row in the same range
leave the count unchanged. So each side sums the two 64-bit halves of every UUID in the range, each
modulo 2**64: an order-independent 128-bit checksum Postgres and DuckDB compute alike from the id's
own bytes, with no hash function the other lacks (a hash would cost twice as much on the source).
The count stays beside it. Summing the halves apart keeps what one value per id lost: a UUID and
its halves swapped, or the nil and the max UUID, differ. Equal (count, checksum) mean equal id sets
but for ids crafted to collide (several rows replaced by others whose halves sum the same), which
only the full content fingerprint of ``--verify`` sees. A difference is located bucket by bucket
(a minute in a run's check, an hour in ``--reconcile``) and, in the buckets that differ, id by id.

Pure SQL text and arithmetic: :mod:`pipeline.source.stats` and :mod:`pipeline.lake.batches` run it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import SupportsInt
from uuid import UUID

MODULUS = 2 ** 64

# an id's halves in Postgres, from a uuid-typed expression: its 8-byte halves as bigints
_PG_HALF = "('x' || encode(substring(uuid_send({id}) from {start} for 8), 'hex'))::bit(64)::bigint"
# A text id is a UUID when it is one in Postgres's spelling (uuid_in: 32 hex digits in any case, a
# hyphen allowed after any group of four, braces both or neither), with ASCII blanks around it
# ignored; both sides read it by this one rule (postgres_id, duckdb_id). DuckDB's own cast takes
# more (a hyphen anywhere), Postgres's regex \s may take more (a no-break space) and its trim()
# strips spaces only: ids the lake loaded were "deleted" in the source for status, and --repair
# removed them; an id led by a tab stopped every load (uuid_in refused it after the regex took it).
# (braces as \x7b and \x7d: the text goes into psycopg's sql.SQL templates, where braces are fields;
# the counts are written out for the same reason)
_PG_HEX = ("(?:" + "[0-9a-f]" * 4 + "-?)") * 7 + "[0-9a-f]" * 4
_BLANK = r"[ \t\n\r\f\v]"  # as both regex engines read these escapes (Postgres ARE, RE2)
_UUID_TEXT = rf"^{_BLANK}*(\x7b{_PG_HEX}\x7d|{_PG_HEX}){_BLANK}*$"
_PG_UUID_TEXT = f"'{_UUID_TEXT}'"
_PG_BLANKS = r"E' \t\n\r\f\x0b'"
_DUCK_BLANKS = "' ' || chr(9) || chr(10) || chr(11) || chr(12) || chr(13)"
# the same halves in DuckDB, from a UUID-typed expression (its text is 32 hex digits and 4 hyphens)
_DUCK_HALF = "('0x' || substr(replace(CAST({id} AS VARCHAR), '-', ''), {start}, 16))::UBIGINT::HUGEINT"


@dataclass(frozen=True)
class IdSum:
    """How many ids a range holds, and the sums of their high and low halves (0 for none); with the
    content proof, the sums of their rows' hashes' halves too (:mod:`pipeline.content_hash`; 0:
    not summed)."""

    count: int = 0
    high: int = 0
    low: int = 0
    content_high: int = 0
    content_low: int = 0

    @classmethod
    def of(cls, count: SupportsInt | None, high: SupportsInt | None, low: SupportsInt | None) -> IdSum:
        """From a query's count and sums of halves: each sum reduced modulo 2**64."""
        return cls(int(count or 0), int(high or 0) % MODULUS, int(low or 0) % MODULUS)

    @classmethod
    def recorded(cls, count: int, checksum: str) -> IdSum:
        """The sums as a batch records them (:attr:`checksum`)."""
        return cls(count, int(checksum[:16], 16), int(checksum[16:], 16))

    def with_content(self, high: SupportsInt | None, low: SupportsInt | None) -> IdSum:
        """These ids with their rows' hash sums (each reduced modulo 2**64)."""
        return replace(self, content_high=int(high or 0) % MODULUS, content_low=int(low or 0) % MODULUS)

    @property
    def ids(self) -> IdSum:
        """The ids alone: what a load's proof records, and what the identity check compares."""
        return IdSum(self.count, self.high, self.low)

    @property
    def checksum(self) -> str:
        """The two sums as 32 hex digits, as ``ops.batches`` and commit info record them."""
        return f"{self.high:016x}{self.low:016x}"

    def __add__(self, other: IdSum) -> IdSum:
        return IdSum.of(self.count + other.count, self.high + other.high, self.low + other.low).with_content(
            self.content_high + other.content_high, self.content_low + other.content_low)

    def as_dict(self) -> dict[str, object]:
        content = ({"content_checksum": f"{self.content_high:016x}{self.content_low:016x}"}
                   if self.content_high or self.content_low else {})
        return {"count": self.count, "checksum": self.checksum, **content}


def of_ids(ids: Iterable[UUID]) -> IdSum:
    """The same (count, checksum) computed here, for ids already in hand."""
    listed = list(ids)
    return IdSum.of(len(listed), sum(int.from_bytes(i.bytes[:8]) for i in listed),
                    sum(int.from_bytes(i.bytes[8:]) for i in listed))


Identity = UUID  # a row's identity (a name the enum below can use: its member UUID shadows the type)


class IdKind(Enum):
    """What a table's key is, and so how both sides name a row by a UUID (its *identity*, what the
    checksum sums and the checks compare)."""

    UUID = "uuid"  # a uuid column: the identity is the id itself
    UUID_TEXT = "uuid_text"  # text spelling a UUID (Postgres's spelling rule, :data:`_UUID_TEXT`)
    # smallint, integer or bigint (serial, identity columns): the lake keeps the key as BIGINT, and
    # its identity is 8 bytes of the md5 of its decimal text, then its own 8 bytes. The halves then
    # sum apart like a UUID's (the keys {1, 4} and {2, 3} have equal sums of keys, not of md5s), and
    # the key reads back from the identity (:meth:`key_of`) for every message that names a row.
    INTEGER = "integer"
    # text of any form, in a table keyed by its own column (SOURCE_TABLES=schema.table:time:id): the
    # lake keeps it as VARCHAR, exactly as the source spells it, and its identity is its md5 (which
    # Postgres and DuckDB compute alike from its UTF-8 bytes). No identity reads back as its key:
    # messages name such a row by that md5 (:meth:`key_of`), which a query can look for
    TEXT = "text"

    @classmethod
    def of_source(cls, udt: str | None, id_column: str = "event_id", lake_type: str | None = None) -> IdKind:
        """The kind of a source id column ``id_column`` of Postgres type ``udt`` (:data:`ID_TYPES`),
        loaded into a lake id column of type ``lake_type`` (None: not made yet). Text is a key of its
        own (:attr:`TEXT`) in a table keyed by its own column whose lake column is not a UUID: a table
        of the events shape is made with a UUID key before its source is read, and a lake made
        before text keys holds a text key as UUIDs (both keep :attr:`UUID_TEXT`)."""
        if udt == "uuid":
            return cls.UUID
        if udt in INTEGER_TYPES:
            return cls.INTEGER
        if udt in OWN_TEXT_TYPES and id_column != "event_id" and lake_type in (None, "VARCHAR"):
            return cls.TEXT
        return cls.UUID_TEXT

    @classmethod
    def of_lake(cls, lake_type: str | None, id_column: str = "event_id") -> IdKind:
        """The kind a lake id column ``id_column`` of DuckDB type ``lake_type`` holds: UUID (or VARCHAR
        spelling one in the events table of a zero-copy lake made by the JDBC reader), an integer, or
        a table's own text key (VARCHAR, keyed by its own column)."""
        if lake_type in LAKE_INTEGER_TYPES:
            return cls.INTEGER
        return cls.TEXT if lake_type == "VARCHAR" and id_column != "event_id" else cls.UUID

    def holds(self, lake_kind: IdKind) -> bool:
        """Can a lake column of ``lake_kind`` (:meth:`of_lake`) hold this source kind's keys?"""
        return lake_kind is (IdKind.UUID if self is IdKind.UUID_TEXT else self)

    @property
    def one_spelling(self) -> bool:
        """Whether one row's id can be spelled only one way (not text read as a UUID, which Postgres
        reads in several spellings)."""
        return self is not IdKind.UUID_TEXT

    @property
    def lake_type(self) -> str:
        return {IdKind.INTEGER: "BIGINT", IdKind.TEXT: "VARCHAR"}.get(self, "UUID")

    @property
    def described(self) -> str:
        return {IdKind.INTEGER: "an integer", IdKind.TEXT: "text"}.get(self, "a UUID")

    def key_of(self, identity: Identity) -> str:
        """The row's key as its table spells it, from its identity (a text key: ``md5:`` and the md5
        of its text, as ``WHERE md5(id) = '…'`` finds it)."""
        if self is IdKind.INTEGER:
            return str(int.from_bytes(identity.bytes[8:], signed=True))
        if self is IdKind.TEXT:
            return f"md5:{identity.hex}"
        return str(identity)


INTEGER_TYPES = ("int2", "int4", "int8")
LAKE_INTEGER_TYPES = ("BIGINT", "INTEGER", "SMALLINT")
# text a table's own key may be (char(n) is not: its readers pad it, its text form does not)
OWN_TEXT_TYPES = ("text", "varchar")
ID_TYPES = ("uuid", "text", "varchar", "bpchar", *INTEGER_TYPES)


def postgres_id(column: str, kind: IdKind) -> str:
    """``column`` (the source's id column) as its identity in Postgres: a uuid itself, a text
    spelling of one (NULL when it spells none), an integer key by :class:`IdKind`'s rule."""
    if kind is IdKind.UUID:
        return column
    if kind is IdKind.INTEGER:
        key = f"({column})::bigint"
        return f"(substr(md5({key}::text), 1, 16) || lpad(to_hex({key}), 16, '0'))::uuid"
    if kind is IdKind.TEXT:  # of its UTF-8 bytes, as DuckDB takes them (a LATIN1 source's are others)
        return f"md5(convert_to({column}::text, 'UTF8'))::uuid"
    return f"(CASE WHEN {column}::text ~* {_PG_UUID_TEXT} THEN btrim({column}::text, {_PG_BLANKS})::uuid END)"


def postgres_among(column: str, kind: IdKind, values: str = "%(among)s") -> str:
    """Rows of ``column`` (the source's id) whose identity is one of ``values`` (an array: the
    parameter :func:`among_values` fills, or :func:`among_literal`): an integer key compared as
    itself, so that its index finds them (no index holds its identity; a text key's md5 is compared
    row by row)."""
    return f"{column if kind is IdKind.INTEGER else postgres_id(column, kind)} = ANY({values})"


def among_values(ids: Iterable[UUID], kind: IdKind) -> list[object]:
    """The array :func:`postgres_among` compares with, for ``ids``: the keys, or the identities."""
    return [int(kind.key_of(identity)) for identity in ids] if kind is IdKind.INTEGER else list(ids)


def among_literal(ids: Iterable[UUID], kind: IdKind) -> str:
    """:func:`among_values` as an SQL literal (a query handed on as text takes no parameters)."""
    values = among_values(ids, kind)
    if kind is IdKind.INTEGER:
        return f"ARRAY[{', '.join(map(str, values))}]::bigint[]"
    quoted = ", ".join(f"'{value}'" for value in values)
    return f"ARRAY[{quoted}]::uuid[]"


def duckdb_key(expr: str, kind: IdKind) -> str:
    """``expr`` (an id: staged text, or a lake column) as the lake holds the key: a UUID by
    Postgres's rule (:func:`duckdb_id`; NULL when it spells none), or a BIGINT (NULL when not one)."""
    if kind is IdKind.INTEGER:
        return f"TRY_CAST(CAST({expr} AS VARCHAR) AS BIGINT)"
    if kind is IdKind.TEXT:
        return f"CAST({expr} AS VARCHAR)"
    return duckdb_id(f"CAST({expr} AS VARCHAR)")


def duckdb_identity(expr: str, kind: IdKind) -> str:
    """``expr`` (a lake id column, or :func:`duckdb_key` of an id as text) as its identity in DuckDB,
    as :func:`postgres_id` gives it."""
    if kind is IdKind.INTEGER:
        key = f"TRY_CAST({expr} AS BIGINT)"
        return f"CAST(substr(md5(CAST({key} AS VARCHAR)), 1, 16) || lpad(to_hex({key}), 16, '0') AS UUID)"
    if kind is IdKind.TEXT:
        return f"CAST(md5(CAST({expr} AS VARCHAR)) AS UUID)"
    return f"TRY_CAST({expr} AS UUID)"


def duckdb_id(text: str) -> str:
    """``text`` (an id as text) as a UUID in DuckDB by the same rule as :func:`postgres_id`: NULL
    when it spells none. The canonical spelling (36 characters, hyphens in place) is taken on
    its length and hyphens alone (one LIKE: a 5M-id scan costs 0.53 s against 0.45 s for the bare
    cast, 0.75 s testing each hyphen apart), without a regular expression: nearly every id is spelled so."""
    return (f"(CASE WHEN {text} LIKE '________-____-____-____-____________' THEN TRY_CAST({text} AS UUID) "
            f"WHEN regexp_full_match({text}, '{_UUID_TEXT}', 'i') "
            f"THEN TRY_CAST(trim({text}, {_DUCK_BLANKS}) AS UUID) END)")


def postgres_sums(uuid_sql: str) -> str:
    """``sum(high), sum(low)`` of the ids ``uuid_sql`` (Postgres sums bigints as numeric: no overflow)."""
    return (f"sum({_PG_HALF.format(id=uuid_sql, start=1)}), "
            f"sum({_PG_HALF.format(id=uuid_sql, start=9)})")


def duckdb_sums(uuid_sql: str) -> str:
    return f"sum({_DUCK_HALF.format(id=uuid_sql, start=1)}), sum({_DUCK_HALF.format(id=uuid_sql, start=17)})"


def postgres_hash_sums(hash_sql: str) -> str:
    """``sum(high), sum(low)`` of the 64-bit halves of ``hash_sql`` (32 hex digits: an md5)."""
    return (f"sum(('x' || substr({hash_sql}, 1, 16))::bit(64)::bigint), "
            f"sum(('x' || substr({hash_sql}, 17, 16))::bit(64)::bigint)")


def duckdb_hash_sums(hash_sql: str) -> str:
    return (f"sum(('0x' || substr({hash_sql}, 1, 16))::UBIGINT::HUGEINT), "
            f"sum(('0x' || substr({hash_sql}, 17, 16))::UBIGINT::HUGEINT)")


def postgres_bucket(seconds: int) -> str:
    """The bucket a source row falls in: whole ``seconds`` since the epoch, UTC (a naive column is
    wall-clock time in the session's zone, which ``::timestamptz`` applies)."""
    return f"floor(extract(epoch FROM event_timestamp::timestamptz) / {seconds})::bigint"


def duckdb_bucket(seconds: int) -> str:
    """The same bucket in DuckDB, floored as Postgres's is: DuckDB's ``//`` rounds toward zero, so a
    row before 1970 fell in the bucket after the source's and --verify called it moved (found by the
    adversary). Exact integer arithmetic: a double loses microseconds far from 1970."""
    us, width = "epoch_us(event_timestamp)", seconds * 1_000_000
    return f"(({us} - ((({us} % {width}) + {width}) % {width})) // {width})"


def bucket_start(bucket: int, seconds: int) -> datetime:
    return datetime.fromtimestamp(0, UTC) + timedelta(seconds=bucket * seconds)


def differing(source: dict[int, IdSum], lake: dict[int, IdSum]) -> list[int]:
    """Buckets whose id sets differ (pure)."""
    return sorted(b for b in source.keys() | lake.keys() if source.get(b, IdSum()) != lake.get(b, IdSum()))
