"""Where a subject's rows are: the SQL that tells a row of the subject (SUBJECT_KEY's value, or an id
an erasure tombstoned) in a lake table and in the quarantine, and every data file and inlined row of a
table, in any snapshot time travel can reach, that holds one (:mod:`pipeline.erase.erasure`).

Files are read by DuckDB each column by its name, as DuckLake wrote it; a Postgres catalog keeps an
inlined text value as bytea, read back as the UTF-8 it holds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from uuid import UUID

import psycopg
from psycopg import sql

from pipeline.columns import EVENT_COLUMNS
from pipeline.errors import ConfigError
from pipeline.id_checksum import IdKind, duckdb_identity, duckdb_key, postgres_id
from pipeline.lake.schema import events_column_types
from pipeline.lake.session import Lake, LakeTable
from pipeline.settings import ResolvedSettings
from pipeline.settings.model import SubjectKey
from pipeline.source.shape import SourceRelation
from pipeline.sqltext import quote_ident, quote_literal

QUARANTINE = "quarantine"  # the ops table a table's unloadable rows are kept in, rows of the subject too


@dataclass(frozen=True)
class Scrubbed:
    """One lake table an erasure scrubs: the relation, how a row names the subject, and its key."""

    schema: str
    name: str
    subject: str  # SQL: true for a row of the subject ($value), or of an erased id
    identity: str  # SQL: the row's identity (NULL for an id that has none)

    @property
    def relation(self) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(self.name)}"


def subject_keys(settings: ResolvedSettings) -> dict[str, SubjectKey]:
    """The image's tables that name a subject, and where (SUBJECT_KEY); refused when none does."""
    keys = dict(settings.subject_keys)
    if not keys:
        raise ConfigError("No table says where its rows name a person (SUBJECT_KEY is unset): nothing was "
                          "erased.",
                          "Set SUBJECT_KEY to the column (user_id) or JSON path (details.user_id) holding "
                          "the subject; with SOURCE_TABLES, table=key pairs (events=details.user_id,...) or "
                          "the table's own subject= (public.events(subject=details.user_id)).")
    return keys


def _text_of(expr: str, key: SubjectKey) -> str:
    """SQL: the subject's value in a row, as text, from ``expr`` (the key's column as text)."""
    if not key.path:
        return expr
    path = "$." + ".".join(f'"{part}"' for part in key.path)
    return f"json_extract_string(CASE WHEN json_valid({expr}) THEN {expr} END, {quote_literal(path)})"


def of_table(table: LakeTable, key: SubjectKey, kind: IdKind, erased: str) -> Scrubbed:
    """The table's rows of the subject: its key's value, or an id in ``erased`` (a relation)."""
    columns = events_column_types(table)
    if key.column not in columns:
        raise ConfigError(f"SUBJECT_KEY names {key.column!r}, which the lake table {table.events_table} "
                          f"does not have (it has {', '.join(columns)}). Nothing was erased.",
                          "Name a column of the table, or a path into its JSON column (details.user_id).")
    if key.path and columns[key.column] not in ("JSON", "VARCHAR"):
        raise ConfigError(f"SUBJECT_KEY {key} is a path into {key.column}, which holds "
                          f"{columns[key.column]}, not JSON. Nothing was erased.",
                          f"Name the column alone ({key.column}).")
    identity = duckdb_identity(quote_ident(table.id_column), kind)
    text = _text_of(f"CAST({quote_ident(key.column)} AS VARCHAR)", key)
    return Scrubbed("main", table.name, f"({text} = $value OR {identity} IN {erased})", identity)


def of_quarantine(table: LakeTable, key: SubjectKey, kind: IdKind, erased: str, pattern: str) -> Scrubbed:
    """The table's rows in ``ops.quarantine``: its own columns by their pipeline names, the others in
    ``source_columns``; a row whose JSON cannot be read, by the parameter named ``pattern``
    (:func:`unreadable_pattern`)."""
    canonical = {table.own(name): name for name in EVENT_COLUMNS}.get(key.column)
    column = (quote_ident(canonical) if canonical else
              f"json_extract_string(source_columns, {quote_literal('$.' + json.dumps(key.column))})")
    identity = duckdb_identity(duckdb_key("event_id", kind), kind)
    # a row whose JSON cannot be read: the key's name and the value as JSON writes them
    # (value_params), as a whole ("user_1" is not within "user_10")
    unreadable = (f" OR (NOT json_valid({column}) AND regexp_matches({column}, ${pattern}))"
                  if key.path else "")
    subject = (f"(table_name = {quote_literal(table.name)} AND ({_text_of(column, key)} = $value{unreadable} "
               f"OR {identity} IN {erased}))")
    return Scrubbed(table.lake.ops_schema, QUARANTINE, subject, identity)


def in_source(conn: psycopg.Connection, source: SourceRelation, key: SubjectKey, kind: IdKind,
              value: str) -> set[UUID]:
    """The identities of every row of the subject the source holds (its rows not loaded yet: after the
    watermark, or later than the look-back, which a load or --reconcile would read). One scan of the
    table: a JSON path is looked for as text first, and read as JSON (in Python) only in the rows
    that hold the value, so a row whose JSON Postgres could not read stops nothing."""
    if key.column not in source.types:
        return set()
    column = sql.Identifier(key.column)
    identity = sql.SQL(postgres_id("event_id", kind))
    if not key.path:
        query = sql.SQL("SELECT {identity} FROM {t} WHERE {column}::text = %(value)s")
        rows = conn.execute(query.format(identity=identity, t=sql.SQL(source.sql), column=column),
                            {"value": value}).fetchall()
        return {row[0] for row in rows if row[0] is not None}
    # the value as JSON text spells it (a quote or a backslash escaped); a row holding any escape may
    # spell it otherwise (\u00e9 for é), so it is read as JSON too
    query = sql.SQL("SELECT {identity}, {column}::text FROM {t} "
                    "WHERE strpos({column}::text, %(spelled)s) > 0 OR strpos({column}::text, '\\') > 0")
    spelled = json.dumps(value, ensure_ascii=False)[1:-1]
    unreadable = re.compile(unreadable_pattern(value, key) or "$^")
    found = set()
    for identity_value, text in conn.execute(query.format(identity=identity, t=sql.SQL(source.sql),
                                                          column=column), {"spelled": spelled}):
        if identity_value is not None and _holds(text, key.path, value, unreadable):
            found.add(identity_value)
    return found


def _first_of_each(pairs: list[tuple[str, object]]) -> dict[str, object]:
    found: dict[str, object] = {}
    for name, value in pairs:
        found.setdefault(name, value)
    return found


def bound(query: str, params: Mapping[str, object]) -> dict[str, object]:
    """Of ``params``, those ``query`` names (DuckDB refuses one it does not)."""
    return {name: value for name, value in params.items() if re.search(rf"\${name}\b", query)}


def _literal(text: str) -> str:
    """``text`` as a literal in a pattern DuckDB's RE2 reads: its metacharacters escaped, nothing else
    (Python's re.escape escapes a space, which RE2 refuses)."""
    return re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", text)


def unreadable_pattern(value: str | None, key: SubjectKey) -> str | None:
    """The parameter the quarantine's test takes besides ``$value`` (:func:`of_quarantine`), and the
    source's for a row whose JSON cannot be read (:func:`in_source`): a pattern (RE2's and Python's
    alike) of the key's last name and the value as JSON writes them, in a row whose JSON cannot be
    read. The value is a JSON string in its quotes, in either spelling of its non-ASCII characters
    (``"user_id": "user_1"``, not ``"user_10"``), or a number when it is one, ended as JSON ends one
    (``"n": 1,``, not ``"n": 10``); or either cut short right after it — the text ends there, or
    inside the string's closing quote (``{"user_id": "user_1"``, ``{"user_id": "user_1``: the
    commonest broken JSON, a payload truncated, holds the value's bytes all the same). None: no value
    (a rerun completing an erasure by its tombstones)."""
    if value is None or not key.path:
        return None
    strings = sorted({json.dumps(value, ensure_ascii=False), json.dumps(value)})
    whole = [_any_case_escapes(_literal(spelled)) for spelled in strings]
    # or cut off before its closing quote
    cut = [_any_case_escapes(_literal(spelled[:-1])) + "$" for spelled in strings]
    if re.fullmatch(r"-?\d+(\.\d+)?([eE][+-]?\d+)?", value):
        whole.append(_literal(value) + r"\s*([,}\]]|$)")
    name = _literal(json.dumps(key.path[-1], ensure_ascii=False))
    return rf"{name}\s*:\s*({'|'.join([*whole, *cut])})"


def _any_case_escapes(pattern: str) -> str:
    """``pattern`` (a :func:`_literal`) with each ``\\uXXXX`` escape matching its hex digits in either
    case, as JSON reads them (``\\u00FC`` is ``\\u00fc``, which json.dumps writes)."""
    return re.sub(r"\\\\u([0-9a-f]{4})", lambda m: "\\\\u" + "".join(
        f"[{d}{d.upper()}]" if d.isalpha() else d for d in m.group(1)), pattern)


def _holds(text: str, path: tuple[str, ...], value: str, unreadable: re.Pattern[str]) -> bool:
    """Does a source row's JSON ``text`` hold ``value`` at ``path`` — read as JSON, or, where it cannot
    be, by the quarantine's pattern (:func:`unreadable_pattern`): the same rule on both sides."""
    try:
        return _at_path(text, path) == value
    except ValueError:
        return unreadable.search(text) is not None


def _at_path(text: str, path: tuple[str, ...]) -> str | None:
    """The value at ``path`` in the JSON ``text``, as text as ``json_extract_string`` gives it."""
    # a key given twice counts once, the first time, as DuckDB's json_extract_string reads it;
    # text that is no JSON raises ValueError
    found: object = json.loads(text, object_pairs_hook=_first_of_each)
    for part in path:
        if not isinstance(found, dict) or part not in found:
            return None
        found = found[part]
    if found is None:
        return None
    return found if isinstance(found, str) else json.dumps(found)


@dataclass(frozen=True)
class Holding:
    """A data file or an inlined table of a scrubbed table that holds rows of the subject, and the
    snapshots that list them (``end`` None: the current one does)."""

    where: str
    begin: int
    end: int | None
    size: int = 0


def data_files(lake: Lake, table: Scrubbed) -> list[tuple[str, int, int | None, int]]:
    """Every data file of ``table`` some retained snapshot lists, or DuckLake has yet to delete:
    (path, begin, end snapshot, size)."""
    meta = lake.metadata()
    [[data_path]] = lake.execute(
        f"SELECT value FROM {meta}.ducklake_metadata WHERE key = 'data_path'").fetchall()
    rows = lake.execute(
        f"SELECT f.path, f.path_is_relative, s.path, s.path_is_relative, t.path, t.path_is_relative, "
        f"f.begin_snapshot, f.end_snapshot, f.file_size_bytes FROM {meta}.ducklake_data_file f "
        f"JOIN (SELECT DISTINCT table_id, schema_id, path, path_is_relative FROM {meta}.ducklake_table "
        f"WHERE table_name = ?) t ON t.table_id = f.table_id "
        f"JOIN (SELECT DISTINCT schema_id, path, path_is_relative FROM {meta}.ducklake_schema "
        "WHERE schema_name = ?) s "
        "ON s.schema_id = t.schema_id", [table.name, table.schema]).fetchall()
    found = []
    for path, relative, schema_path, schema_relative, table_path, table_relative, begin, end, size in rows:
        if relative:
            base = table_path if not table_relative else (
                (schema_path if not schema_relative else data_path + schema_path) + table_path)
            path = base + path
        found.append((path, int(begin), None if end is None else int(end), int(size or 0)))
    return found


FILE_COLUMN = "_el_holding_file"


def _inlined_tables(lake: Lake, table: Scrubbed) -> list[str]:
    meta = lake.metadata()
    return [f"{meta}.{quote_ident(name)}" for (name,) in lake.execute(
        f"SELECT i.table_name FROM {meta}.ducklake_inlined_data_tables i "
        f"JOIN (SELECT DISTINCT table_id, schema_id FROM {meta}.ducklake_table WHERE table_name = ?) t "
        f"ON t.table_id = i.table_id JOIN (SELECT DISTINCT schema_id FROM {meta}.ducklake_schema "
        "WHERE schema_name = ?) s ON s.schema_id = t.schema_id", [table.name, table.schema]).fetchall()]


def holdings(lake: Lake, table: Scrubbed, params: Mapping[str, object]) -> list[Holding]:
    """Where ``table``'s rows of the subject are, in any snapshot time travel can reach: files
    (read with DuckDB, each column by name) and inlined rows."""
    found: list[Holding] = []
    files = {path: (begin, end, size) for path, begin, end, size in data_files(lake, table)
             if lake.data_folder.exists_uri(path)}
    if files:
        held = lake.execute(
            # the path under a name of ours: a table may have its own column named filename
            f"SELECT DISTINCT {FILE_COLUMN} FROM read_parquet($files, filename = '{FILE_COLUMN}', "
            "union_by_name = true, "
            f"hive_partitioning = false) WHERE {table.subject}",
            {**bound(table.subject, params), "files": sorted(files)}).fetchall()
        found += [Holding(path, files[path][0], files[path][1], files[path][2]) for (path,) in held]
    for inlined in _inlined_tables(lake, table):
        for begin, end in lake.execute(f"SELECT begin_snapshot, end_snapshot FROM {_as_text(lake, inlined)} "
                                       f"WHERE {table.subject}", bound(table.subject, params)).fetchall():
            found.append(Holding(inlined, int(begin), None if end is None else int(end)))
    return found


def _as_text(lake: Lake, inlined: str) -> str:
    """An inlined rows' table with its BLOB columns read as the UTF-8 text they hold (a Postgres
    catalog keeps a VARCHAR or JSON column's inlined values as bytea)."""
    described = lake.execute(f"SELECT column_name, column_type FROM (DESCRIBE {inlined})").fetchall()
    blobs = [name for name, kind in described if kind == "BLOB"]
    if not blobs:
        return inlined
    decoded = ", ".join(f"decode({quote_ident(b)}) AS {quote_ident(b)}" for b in blobs)
    return f"(SELECT * REPLACE ({decoded}) FROM {inlined})"


def expiring(lake: Lake, held: list[Holding]) -> tuple[list[int], int]:
    """The retained snapshots that list a holding (each from its begin to before its end; to the
    latest when current), and how many others stay."""
    retained = [r[0] for r in lake.execute(
        f"SELECT snapshot_id FROM {lake.name}.snapshots() ORDER BY 1").fetchall()]
    after = retained[-1] + 1 if retained else 0
    listing = [v for v in retained if any(h.begin <= v < (after if h.end is None else h.end) for h in held)]
    return listing, len(retained) - len(listing)
