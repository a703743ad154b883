"""A row's contents as one hash that Postgres and DuckDB compute alike: the content proof.

The id checksum (:mod:`pipeline.id_checksum`) says which rows a range holds, not what they hold:
a row the source updated after loading (its ``details``, an ``orders`` row's ``amount``) kept the
same id, and every check called the lake exact while ``--verify`` said it differed. So each side
also sums, per range, a hash of every row: md5 over each compared column's text, in one form per
kind of value, written here once for both dialects. Each value enters as its byte length, ``:``
and its text (``N`` for NULL), so no two rows' texts run together into one.

The forms are the ones both sides print the same way, measured against Postgres' own output
(``tests/integration/test_content_proof.py``): integers, decimals, booleans, UUIDs, JSON (the
lake keeps jsonb's text as it was sent) and every type the lake holds as text print alike; an
instant is its microseconds since the epoch (a naive column read as wall-clock time in the
session's zone, as a load reads it), a date its days since 1970-01-01 (any era), and a double
its 17 significant digits (exactly the double: the two sides' shortest texts differ).

Which columns are compared: the lake table's columns that the source still has, each in the form
of the lake's type (a column the source dropped is the lake's history; one the lake lacks, under
``SCHEMA_CHANGES=discard_value``, is not loaded). Pure SQL text: :mod:`pipeline.load.proof` applies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Context

from pipeline.columns import ID, TIME
from pipeline.id_checksum import IdKind, duckdb_identity, postgres_id
from pipeline.sqltext import quote_ident

TEXT, INSTANT, DAY, DOUBLE, IDENTITY = "text", "instant", "day", "double", "id"
NUMERIC_DOUBLE = "numeric as double"  # a numeric source column the lake holds as a double
ZERO, MINUS_ZERO = "'0'::float8", "'-0'::float8"
# the smallest magnitudes a decimal text parses to an infinite, and to a zero double (strtod's
# rounding): Postgres raises there, DuckDB reads infinity and zero
_DOUBLE_OVERFLOW = str(2 ** 1024 - 2 ** 970)
_DOUBLE_UNDERFLOW = format(Context(prec=1100).power(2, -1075), "f")
_TIME_TYPES = ("timestamp", "timestamptz")
_NUMBER_TYPES = ("float4", "float8", "numeric", "int2", "int4", "int8")


@dataclass(frozen=True)
class Column:
    """One compared column: its name in the canonical relation, and the form its value is hashed in."""

    name: str
    form: str


@dataclass(frozen=True)
class RowHash:
    """The compared columns of one table, in the order hashed (both sides take the same)."""

    columns: tuple[Column, ...]
    id_kind: IdKind = IdKind.UUID  # the table's key (:class:`pipeline.id_checksum.IdKind`)
    # the source database holds text as UTF-8 (the bytes DuckDB hashes); else Postgres hashes its
    # text converted to UTF-8 (SourceRelation.utf8)
    utf8: bool = True

    @classmethod
    def of(cls, lake_types: Mapping[str, str], source_types: Mapping[str, str], id_column: str = ID,
           time_column: str = TIME, *, id_kind: IdKind = IdKind.UUID, utf8: bool = True) -> RowHash:
        """The columns the lake table (``lake_types``: name -> DuckDB type) and the source
        (``source_types``: name -> Postgres udt) both have, the id and time columns under the
        canonical names every relation gives them (:mod:`pipeline.columns`)."""
        columns = [Column(ID, IDENTITY), Column(TIME, INSTANT)]
        for name, kind in sorted(lake_types.items()):
            if name in (id_column, time_column) or name not in source_types:
                continue
            columns.append(Column(name, _form(kind.upper(), source_types[name])))
        return cls(tuple(columns), id_kind, utf8)

    def postgres(self) -> str:
        """md5 (32 hex digits) of a source row, over the canonical relation's columns."""
        if self.utf8:
            return f"md5({' || '.join(framed(self.postgres_text(c), 'octet_length') for c in self.columns)})"
        # byte counts and bytes as UTF-8 has them
        as_utf8 = [f"convert_to({self.postgres_text(c)}, 'UTF8')" for c in self.columns]
        return ("md5(" + " || ".join(f"coalesce(octet_length({text})::text::bytea || ':'::bytea || {text}, "
                                     "'N'::bytea)" for text in as_utf8) + ")")

    def duckdb(self) -> str:
        """md5 (32 hex digits) of a lake row, over the canonical relation's columns."""
        return f"md5({' || '.join(framed(self.duckdb_text(c), 'strlen') for c in self.columns)})"

    def postgres_text(self, column: Column) -> str:
        """``column``'s value in a source row as the text hashed."""
        value = quote_ident(column.name)
        if column.form == IDENTITY:
            return f"({postgres_id(value, self.id_kind)})::text"
        if column.form == INSTANT:
            return postgres_instant_text(value)
        if column.form == DAY:
            return (f"CASE WHEN isfinite({value}) THEN ({value} - DATE '1970-01-01')::text "
                    f"ELSE {value}::text END")
        if column.form == DOUBLE:  # as the lake got it: the source's text, parsed as a double
            return postgres_double_text(f"{value}::text::float8")
        if column.form == NUMERIC_DOUBLE:  # beyond a double's range: infinite or zero, as DuckDB reads it
            return (f"CASE WHEN {value} IN ('NaN', 'Infinity', '-Infinity') THEN "
                    f"{postgres_double_text(f'{value}::float8')} "
                    f"WHEN abs({value}) >= {_DOUBLE_OVERFLOW} THEN "
                    f"CASE WHEN {value} > 0 THEN 'Infinity' ELSE '-Infinity' END "
                    f"WHEN {value} <> 0 AND abs({value}) <= {_DOUBLE_UNDERFLOW} THEN "
                    f"{postgres_double_text(f'(CASE WHEN {value} > 0 THEN {ZERO} ELSE {MINUS_ZERO} END)')} "
                    f"ELSE {postgres_double_text(f'{value}::float8')} END")
        return f"{value}::text"

    def duckdb_text(self, column: Column) -> str:
        """``column``'s value in a lake row as the text hashed."""
        value = quote_ident(column.name)
        if column.form == IDENTITY:
            return f"CAST({duckdb_identity(value, self.id_kind)} AS VARCHAR)"
        if column.form == INSTANT:
            return duckdb_instant_text(value)
        if column.form == DAY:
            return (f"CASE WHEN isfinite({value}) THEN CAST({value} - DATE '1970-01-01' AS VARCHAR) "
                    f"ELSE CAST({value} AS VARCHAR) END")
        if column.form in (DOUBLE, NUMERIC_DOUBLE):
            return duckdb_double_text(value)
        return f"CAST({value} AS VARCHAR)"


def _form(lake_type: str, udt: str) -> str:
    """The form a column is hashed in: by the lake's type, where the source's holds that kind too
    (else both are compared as text, and a retyped column differs: it does)."""
    if lake_type in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ") and udt in _TIME_TYPES:
        return INSTANT
    if lake_type == "DATE" and udt == "date":
        return DAY
    if lake_type in ("DOUBLE", "FLOAT") and udt == "numeric":
        return NUMERIC_DOUBLE
    if lake_type in ("DOUBLE", "FLOAT") and udt in _NUMBER_TYPES:
        return DOUBLE
    return TEXT


def postgres_instant_text(value: str) -> str:
    """A Postgres time (naive: wall-clock time in the session's zone) as microseconds since the
    epoch; numeric(40, 0): Postgres' latest years are past a bigint of microseconds."""
    return (f"CASE WHEN isfinite({value}) THEN ((extract(epoch FROM {value}::timestamptz) "
            f"* 1000000)::numeric(40, 0))::text ELSE {value}::text END")


def duckdb_instant_text(value: str) -> str:
    """A DuckDB instant as :func:`postgres_instant_text` prints it."""
    return (f"CASE WHEN isfinite({value}) THEN CAST(epoch_us({value}) AS VARCHAR) "
            f"ELSE CAST({value} AS VARCHAR) END")


def framed(text: str, length: str) -> str:
    """A value as ``<bytes>:<text>``, or ``N`` for NULL (``length``: each dialect's byte count)."""
    return f"coalesce({length}({text})::VARCHAR || ':' || ({text}), 'N')"


def postgres_double_text(value: str) -> str:
    """A Postgres float8 as 17 significant digits in scientific notation: exactly the double (each
    has its own), printed by C's rounding, as :func:`duckdb_double_text` prints it."""
    return (f"(CASE WHEN {value} IN ('NaN', 'Infinity', '-Infinity') THEN {value}::text "
            f"ELSE ltrim(to_char({value}, '9.9999999999999999EEEE')) END)")


def duckdb_double_text(value: str) -> str:
    """A DuckDB double as :func:`postgres_double_text` prints it. (Each side's shortest text is not
    the other's: DuckDB writes ``100.0`` for ``100``, ``1000000000000000.0`` for ``1e+15``, and
    ``5.299064834871378e+16`` where Postgres keeps a 17th digit.)"""
    return (f"(CASE WHEN isnan({value}) THEN 'NaN' WHEN {value} = 'infinity'::DOUBLE THEN 'Infinity' "
            f"WHEN {value} = '-infinity'::DOUBLE THEN '-Infinity' ELSE printf('%.16e', {value}) END)")
