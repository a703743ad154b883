"""A table's column statistics in the catalog (``ducklake_table_column_stats``: each column's min and
max over the whole table) made again from the files the table lists now.

DuckLake only ever widens them: a DELETE, or an UPDATE moving every row of a file, leaves the old
bounds, and so do the values of rows no file holds any more. Its rewrite of files with deleted rows
makes them again, but only when it rewrites a file: not when the deleted rows filled their files
(DuckLake ends such a file at once), nor when every file that lost rows was moved by an UPDATE. An
erasure must not leave the subject's value there (:mod:`pipeline.erase.erasure`), so it has them
made again here, from ``ducklake_file_column_stats`` of the current files, as DuckLake's rewrite
does: each bound is still a bound of every value the table holds, compared as the column's type.
"""

from __future__ import annotations

from pipeline.lake.session import Lake
from pipeline.sqltext import one_row, quote_ident


def tighten(lake: Lake, schema: str, table: str) -> int:
    """Make ``schema.table``'s column bounds again from its current files; a column whose values
    cannot be compared here (a nested one's fields) loses its bounds (DuckLake reads that as none
    known). Call once the table's inlined rows are flushed (theirs are in no file's statistics;
    refused while it holds any), with no writer of the table about (the caller holds its promote
    lock). Returns how many columns' bounds changed."""
    catalog = lake.metadata()
    found = lake.execute(
        f"SELECT t.table_id FROM {catalog}.ducklake_table t JOIN {catalog}.ducklake_schema s "
        "USING (schema_id) WHERE t.end_snapshot IS NULL AND s.end_snapshot IS NULL "
        "AND t.table_name = ? AND s.schema_name = ?", [table, schema]).fetchone()
    if found is None:
        return 0
    table_id = int(found[0])
    for (inlined,) in lake.execute(f"SELECT table_name FROM {catalog}.ducklake_inlined_data_tables "
                                   "WHERE table_id = ?", [table_id]).fetchall():
        if one_row(lake.execute(f"SELECT count(*) FROM {catalog}.{quote_ident(inlined)} "
                                "WHERE end_snapshot IS NULL"))[0]:
            raise RuntimeError(f"{schema}.{table} holds inlined rows: its bounds are made from its files "
                               "once they are flushed")
    types = {name: kind for name, kind in lake.execute(
        f"SELECT column_name, column_type FROM (DESCRIBE {quote_ident(lake.name)}.{quote_ident(schema)}."
        f"{quote_ident(table)})").fetchall()}
    columns = lake.execute(
        f"SELECT c.column_id, c.column_name, c.parent_column IS NULL, s.min_value, s.max_value "
        f"FROM {catalog}.ducklake_table_column_stats s JOIN {catalog}.ducklake_column c "
        "ON c.table_id = s.table_id AND c.column_id = s.column_id AND c.end_snapshot IS NULL "
        "WHERE s.table_id = ?", [table_id]).fetchall()
    changed = 0
    for column_id, name, top_level, old_min, old_max in columns:
        kind = types.get(name) if top_level else None
        bounds: tuple[object, object] = (None, None)
        if kind is not None:
            # as DuckLake compares them: cast to the column's type (text order is not a number's)
            # a file holding values but no bound of them, or a bound that is not a value of the type
            # (DuckLake cuts a long text's bounds to 256 characters: a JSON cut short is no JSON),
            # leaves the table's unknown
            low, high, unbounded = one_row(lake.execute(
                f"SELECT arg_min(f.min_value, TRY_CAST(f.min_value AS {kind})), "
                f"arg_max(f.max_value, TRY_CAST(f.max_value AS {kind})), "
                "bool_or((f.min_value IS NULL OR f.max_value IS NULL) AND coalesce(f.value_count, 1) > 0 "
                f"OR TRY_CAST(f.min_value AS {kind}) IS NULL <> (f.min_value IS NULL) "
                f"OR TRY_CAST(f.max_value AS {kind}) IS NULL <> (f.max_value IS NULL)) "
                f"FROM {catalog}.ducklake_file_column_stats f JOIN {catalog}.ducklake_data_file d "
                "USING (data_file_id) WHERE d.table_id = ? AND d.end_snapshot IS NULL AND f.column_id = ?",
                [table_id, column_id]))
            bounds = (None, None) if unbounded else (low, high)
        if bounds != (old_min, old_max):
            lake.execute(f"UPDATE {catalog}.ducklake_table_column_stats SET min_value = ?, max_value = ? "
                         "WHERE table_id = ? AND column_id = ?", [*bounds, table_id, column_id])
            changed += 1
    return changed
