"""Which staged rows can be loaded, and where the others go (pure SQL text).

A row is loaded when its ``event_id`` is a UUID as Postgres spells one (any case, braces or not,
a hyphen after any group of four digits, ASCII blanks around it ignored:
:func:`pipeline.id_checksum.duckdb_id`), its ``event_timestamp`` is set, and its ``details`` are
valid JSON or NULL. Anything else goes to ``ops.quarantine`` with the raw
values as text and the reason — never dropped, never crashing the batch. Among rows staged
with the same id and different contents the winner is the newest ``created_at`` (then the
latest ``event_timestamp``, then the larger ``event_type`` and ``details``, so the choice is
deterministic); the others are quarantined as conflicts. Exact copies are plain duplicates.

The columns validation adds beside a table's own (the reason, the raw id and details, the
conflict ranking, the quarantine hash) carry a prefix no column of that table starts with
(:class:`Helpers`): a ``refunds`` table's own ``reason`` once shadowed ours, and 1,520 of its
2,000 rows were dropped as "duplicates".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.id_checksum import IdKind, duckdb_identity, duckdb_key
from pipeline.sqltext import quote_ident, quote_literal

REASON_NULL_ID = "event_id is NULL"
REASON_BAD_ID = "event_id is not a UUID"
REASON_BAD_KEY = "event_id is not an integer"  # a table keyed by an integer (pipeline.id_checksum.IdKind)
# or before year 1, or from the horizon on: the start of the year after next (pipeline.source.window)
REASON_NULL_TS = "event_timestamp is NULL, infinite or out of range (before year 1, or years ahead)"
REASON_BAD_JSON = "details is not valid JSON"
REASON_CONFLICT = "event_id staged twice with different contents; kept the newest created_at"
# a value of the table's other columns its lake column cannot hold (a NaN in a DECIMAL, a JSON
# text DuckDB refuses, a time past DuckDB's range): the row is set aside whole, never loaded with a
# NULL there; the reason goes on to name the column and its lake type
REASON_UNFIT = "a value its lake column cannot hold"


@dataclass(frozen=True)
class Helpers:
    """The names of the columns validation adds, none of them a name the table has (DuckDB
    compares names without case, so neither is any spelling of one)."""

    prefix: str = "_el_"

    @classmethod
    def beside(cls, columns: Iterable[str] = ()) -> Helpers:
        taken = [name.lower() for name in columns]
        prefix = cls.prefix
        while any(name.startswith(prefix) for name in taken):
            prefix = "_" + prefix
        return cls(prefix)

    @property
    def reason(self) -> str:
        return f"{self.prefix}reason"

    @property
    def raw_id(self) -> str:
        return f"{self.prefix}raw_event_id"

    @property
    def raw_details(self) -> str:
        return f"{self.prefix}raw_details"

    @property
    def rank(self) -> str:
        return f"{self.prefix}rank"

    @property
    def content(self) -> str:
        return f"{self.prefix}content"

    @property
    def winner(self) -> str:
        return f"{self.prefix}winner"

    @property
    def raw_hash(self) -> str:
        return f"{self.prefix}raw_hash"

    @property
    def unfit(self) -> str:
        return f"{self.prefix}unfit"

    @property
    def raw_columns(self) -> str:
        return f"{self.prefix}raw_columns"

    @property
    def split_time(self) -> str:  # the JDBC reader's (pipeline.extract.spark_engine), never staged
        return f"{self.prefix}split_time"


def validated_sql(relation: str, extra_columns: dict[str, str] | None = None, *,
                  id_kind: IdKind = IdKind.UUID) -> str:
    """Every row of ``relation``, typed for the lake, with ``reason`` NULL when it can be loaded.
    ``extra_columns`` (name -> lake type) are columns the source added; they arrive as text and
    are cast (a value that does not cast becomes NULL: the text stays in the source). The added
    columns are named by :meth:`Helpers.beside` ``extra_columns``."""
    cast_extra = "".join(f", TRY_CAST({quote_ident(name)} AS {kind}) AS {quote_ident(name)}"
                     for name, kind in (extra_columns or {}).items())
    h = Helpers.beside(extra_columns or ())
    # the other columns as the source sent them, for a quarantined row (unread otherwise: pruned)
    raw = ", ".join(f"{quote_literal(name)}, CAST({quote_ident(name)} AS VARCHAR)"
                    for name in extra_columns or {})
    raw_extra = f", json_object({raw}) AS {h.raw_columns}" if raw else f", NULL::JSON AS {h.raw_columns}"
    # the first of them whose value its lake column cannot hold, read beside the staged text (the
    # raw columns' JSON is built only for the rows quarantined)
    unfit = "".join(f" WHEN {_unfit(name, kind)} THEN {quote_literal(f'{REASON_UNFIT}: {name} as {kind}')}"
                    for name, kind in (extra_columns or {}).items())
    unfit_extra = f", CASE{unfit} END AS {h.unfit}" if unfit else ""
    unfit_reason = f"\n        WHEN {h.unfit} IS NOT NULL THEN {h.unfit}" if unfit else ""
    return f"""
    SELECT *, CASE
        WHEN {h.raw_id} IS NULL THEN '{REASON_NULL_ID}'
        WHEN event_id IS NULL THEN '{REASON_BAD_KEY if id_kind is IdKind.INTEGER else REASON_BAD_ID}'
        WHEN event_timestamp IS NULL OR NOT isfinite(event_timestamp)
             OR event_timestamp < TIMESTAMPTZ '0001-01-01 00:00:00+00' THEN '{REASON_NULL_TS}'
        WHEN {h.raw_details} IS NOT NULL AND details IS NULL THEN '{REASON_BAD_JSON}'{unfit_reason}
    END AS {h.reason}
    FROM (SELECT CAST(event_id AS VARCHAR) AS {h.raw_id}, CAST(details AS VARCHAR) AS {h.raw_details},
                 -- the id by Postgres's rule, so both sides name a row alike (id_checksum)
                 {duckdb_key("event_id", id_kind)} AS event_id,
                 CAST(event_type AS VARCHAR) AS event_type,
                 CAST(event_timestamp AS TIMESTAMPTZ) AS event_timestamp,
                 TRY_CAST(CAST(details AS VARCHAR) AS JSON) AS details,  -- NULL when not JSON
                 CAST(created_at AS TIMESTAMPTZ) AS created_at{cast_extra}{unfit_extra}{raw_extra}
          FROM {relation})
    """


# Lake types whose text DuckDB prints as Postgres printed the value it came from: a value whose text
# does not come back was changed by the cast (a column retyped in the source: '5.50' read into the
# lake's BIGINT as 6)
_SAME_TEXT = ("BIGINT", "INTEGER", "SMALLINT", "BOOLEAN", "UUID")


def _unfit(name: str, kind: str) -> str:
    """Staged column ``name`` holds a value its cast to ``kind`` did not keep: none, or (for
    :data:`_SAME_TEXT` types and decimals) not its text."""
    raw, cast = f"CAST({quote_ident(name)} AS VARCHAR)", f"TRY_CAST({quote_ident(name)} AS {kind})"
    lost = f"{cast} IS NULL"
    if kind.upper() in _SAME_TEXT or kind.upper().startswith("DECIMAL"):
        lost = f"({lost} OR CAST({cast} AS VARCHAR) <> {raw})"
    return f"{raw} IS NOT NULL AND {lost}"


def json_pointer(name: str) -> str:
    """The JSON pointer of key ``name`` (a key alone is read as a path when it starts with $ or /)."""
    return "/" + name.replace("~", "~0").replace("/", "~1")


# the staged batch being promoted
STAGED = "read_parquet($files, hive_partitioning = false)"  # zero-copy's files sit in day folders
def _content(extra_columns: dict[str, str] | None) -> str:
    """A row's contents as one hash: its event columns and the table's other columns (two rows of one
    id that differ only there are a conflict too: a table with its own columns has little else)."""
    h = Helpers.beside(extra_columns or ())
    others = "".join(f", CAST({quote_ident(name)} AS VARCHAR)" for name in extra_columns or {})
    return (f"md5(concat_ws('|', event_type, CAST(event_timestamp AS VARCHAR), {h.raw_details}, "
            f"CAST(created_at AS VARCHAR){others}))")


def _winner_first(extra_columns: dict[str, str] | None) -> str:
    """Which of one id's rows is loaded: the newest created_at, then the latest time, then the
    larger contents — the last tie broken by every column, so the choice never depends on order."""
    h = Helpers.beside(extra_columns or ())
    last = f", {_content(extra_columns)} DESC" if extra_columns else ""
    return (f"ORDER BY created_at DESC NULLS LAST, event_timestamp DESC, event_type DESC NULLS LAST, "
            f"{h.raw_details} DESC NULLS LAST{last}")


def batch_stats_sql(extra_columns: dict[str, str] | None = None, *, id_kind: IdKind = IdKind.UUID) -> str:
    """What one scan tells about a batch: rows, loadable rows, their distinct ids and time range,
    and how many cannot be loaded — its other columns (``extra_columns``, name -> lake type) read
    too, as promotion validates them (read apart, a row whose value its lake column cannot hold
    counted as loadable, and was neither loaded nor quarantined)."""
    reason = Helpers.beside(extra_columns or ()).reason
    return f"""
    SELECT count(*), count(*) FILTER (WHERE {reason} IS NULL),
           count(DISTINCT event_id) FILTER (WHERE {reason} IS NULL),
           min(event_timestamp) FILTER (WHERE {reason} IS NULL),
           max(event_timestamp) FILTER (WHERE {reason} IS NULL),
           count(*) FILTER (WHERE {reason} IS NOT NULL)
    FROM ({validated_sql(STAGED, extra_columns, id_kind=id_kind)})
    """


def loadable_sql(has_duplicates: bool, relation: str | None = None,
                 extra_columns: dict[str, str] | None = None, *, id_kind: IdKind = IdKind.UUID) -> str:
    """The rows to load: valid, one per id (the winner) when there may be repeated ids. Over
    ``relation`` instead of the staged batch, this is the source as the lake should hold it."""
    validated = validated_sql(relation or STAGED, extra_columns, id_kind=id_kind)
    rows = f"SELECT * FROM ({validated}) WHERE {Helpers.beside(extra_columns or ()).reason} IS NULL"
    if not has_duplicates:
        return rows
    return f"{rows} QUALIFY row_number() OVER (PARTITION BY event_id {_winner_first(extra_columns)}) = 1"


def rejected_sql(has_invalid: bool, has_duplicates: bool,
                 extra_columns: dict[str, str] | None = None, relation: str | None = None, *,
                 id_kind: IdKind = IdKind.UUID) -> str | None:
    """The rows to quarantine (with ``reason``): invalid ones, and conflict losers (rows of one id
    whose contents, the table's other columns included, differ from the one loaded). Over
    ``relation`` instead of the staged batch: the source's rows a repair could not load."""
    parts = []
    validated = validated_sql(relation or STAGED, extra_columns, id_kind=id_kind)
    h = Helpers.beside(extra_columns or ())
    if has_invalid:
        parts.append(f"SELECT * FROM ({validated}) WHERE {h.reason} IS NOT NULL")
    if has_duplicates:
        content = _content(extra_columns)
        parts.append(f"""
            SELECT * EXCLUDE ({h.rank}, {h.content}, {h.winner}) REPLACE ('{REASON_CONFLICT}' AS {h.reason})
            FROM (SELECT *, row_number() OVER w AS {h.rank}, {content} AS {h.content},
                         first_value({content}) OVER w AS {h.winner}
                  FROM ({validated}) WHERE {h.reason} IS NULL
                  WINDOW w AS (PARTITION BY event_id {_winner_first(extra_columns)}))
            WHERE {h.rank} > 1 AND {h.content} <> {h.winner}""")
    return " UNION ALL ".join(parts) if parts else None


def quarantine_sql(quarantine_table: str, rejected: str, extra_columns: dict[str, str] | None = None,
                   erased: str | None = None, *, id_kind: IdKind = IdKind.UUID) -> str:
    """Insert ``rejected`` rows (of :func:`rejected_sql` with the same ``extra_columns``) as raw
    text, each distinct bad row once across all batches. ``erased``: the table's erased identities
    (:func:`pipeline.lake.tombstones.erased_relation`): an erased row the source still holds, read
    again, is kept out of the quarantine as out of the table (an erasure took it from both)."""
    h = Helpers.beside(extra_columns or ())
    identity = duckdb_identity(duckdb_key(h.raw_id, id_kind), id_kind)
    never_again = (f"\n      AND NOT EXISTS (SELECT 1 FROM {erased} erased "
                   f"WHERE erased.identity = {identity})" if erased else "")
    return f"""
    INSERT INTO {quarantine_table} (batch_id, table_name, reason, event_id, event_type, event_timestamp,
                                    details, created_at, raw_hash, quarantined_at, source_columns)
    SELECT DISTINCT ON ({h.raw_hash}) $batch_id, $table_name, {h.reason}, {h.raw_id}, event_type,
           CAST(event_timestamp AS VARCHAR), {h.raw_details}, CAST(created_at AS VARCHAR), {h.raw_hash},
           now(), {h.raw_columns}
    FROM (SELECT *, md5(concat_ws('|', {h.reason}, coalesce({h.raw_id}, '<NULL>'), event_type,
                                  CAST(event_timestamp AS VARCHAR), {h.raw_details},
                                  CAST(created_at AS VARCHAR),
                                  CAST({h.raw_columns} AS VARCHAR))) AS {h.raw_hash}
          FROM ({rejected}))
    WHERE {h.raw_hash} NOT IN (SELECT raw_hash FROM {quarantine_table}
                               WHERE table_name = $table_name){never_again}
    """
