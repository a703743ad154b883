"""The columns every stage speaks of, and how a table with its own reads as them.

Every stage names a row by ``event_id`` and dates it by ``event_timestamp`` (and reads
``event_type``, ``details`` and ``created_at``): the staged files, the SQL of the window, the
identity check, validation and verification. A table with its own id or time column
(``SOURCE_TABLES=public.sessions:started_at:session_id``), or without ``event_type`` or
``details``, is read through a relation that adds those names — its id column again as
``event_id``, its time column as ``event_timestamp``, NULL for an optional column it lacks —
beside every column of its own. So the stages keep one vocabulary while the lake table keeps
the table's own columns; the relation is plain enough that Postgres and DuckDB push a range on
``event_timestamp`` down to the time column's index or file statistics.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.sqltext import quote_ident

ID, TIME = "event_id", "event_timestamp"
# the columns beside the id and the time that a table may lack, and the type it reads as then
OPTIONAL = {"event_type": "text", "details": "json", "created_at": "timestamptz"}
# and the type a lake table holds it in
OPTIONAL_LAKE_TYPES = {"event_type": "VARCHAR", "details": "JSON", "created_at": "TIMESTAMPTZ"}


def canonical_relation(table_sql: str, id_column: str = ID, time_column: str = TIME,
                       absent: Iterable[str] = (), *, system_columns: bool = False) -> str:
    """``table_sql`` as the stages read it (itself when it already has the canonical names).
    ``system_columns``: Postgres' ``xmin`` and ``ctid`` stay reachable through it (the arrival
    rule and page-range slices read them)."""
    added = ([f"{quote_ident(id_column)} AS {ID}"] if id_column != ID else []) + \
        ([f"{quote_ident(time_column)} AS {TIME}"] if time_column != TIME else []) + \
        [f"NULL::{OPTIONAL[name]} AS {name}" for name in absent]
    if not added:
        return table_sql
    system = ["xmin", "ctid"] if system_columns else []
    return f"(SELECT *, {', '.join([*system, *added])} FROM {table_sql}) AS shaped"


def own_name(name: str, id_column: str, time_column: str) -> str:
    """The table's own name of the canonical column ``name``."""
    return {ID: id_column, TIME: time_column}.get(name, name)
