"""The trust boundary of an ad-hoc SQL session: what ``--sql`` may touch.

A read-only session reads the lake and nothing else; a ``--write`` session may change the
lake but no file outside its data path. Two layers, so that one mistake does not open both:

1. Before anything runs, every statement of the session is judged on DuckDB's parse tree
   (:mod:`.statement_judge`): in a read-only session only queries run, calling only functions
   on an allow-list; one refused statement refuses the session, so a text never half-runs.
2. DuckDB's own sandbox, set after the lake is attached and then locked: no external access
   (files, network, other databases) except the lake's own folders, no extension loading,
   no usable catalog secret left in a read-only session, configuration frozen.

Everything here is pure: it plans statements and judges statement types.
"""

from __future__ import annotations

import re

from pipeline import actions
from pipeline.sqltext import quote_literal


def refused_hint() -> str:
    """The way out of a refusal, in the front end's words (made when said, not at import)."""
    return f"read-only; use {actions.WRITE}"


def refused_message(query: str, reason: str) -> str:
    """What a refused statement's error says: the statement (shortened), why, and the way out."""
    words = " ".join(query.split())
    shown = words if len(words) <= 80 else words[:77] + "..."
    return f"{shown} is not allowed: this session is {refused_hint()} ({reason})."


SPILL_FACTOR = 8  # a session may spill this many times its memory bound to its private temp folder


def spill_limit(memory_limit: str) -> str:
    """``2GB`` -> ``16GB``: the temp folder bound of a session whose memory bound is ``memory_limit``
    (a size SQL_MEMORY accepts: a number and a unit)."""
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*$", memory_limit)
    if match is None:
        return memory_limit
    number, unit = float(match.group(1)), match.group(2)
    return f"{number * SPILL_FACTOR:g}{unit}"


def _local_dir(path: str) -> str:
    return path if path.endswith("/") else path + "/"


def sandbox_statements(*, data_path: str, catalog_file: str | None, catalog_secret: str | None,
                       write: bool, temp_dir: str, memory_limit: str) -> list[str]:
    """Statements that close a session opened with the lake attached.

    ``catalog_secret`` is the DuckDB secret holding the catalog's Postgres password: the
    attach has its connection, and a read-only session must not be able to reuse the
    secret to attach the catalog database (or the lake itself) again for writing.
    ``catalog_file`` is a SQLite/DuckDB catalog the attached lake keeps using. ``temp_dir`` is
    a private empty folder for what a big query spills: DuckDB lets a session reach its temp
    directory, which would otherwise be ``.tmp`` in whatever folder the user stands in.
    ``memory_limit`` bounds the session (SQL_MEMORY): DuckDB's own default is 80% of the machine's
    memory, which one aggregate would take from the pipeline and Postgres beside it.
    """
    statements = []
    if catalog_secret and not write:
        statements.append(f"DROP SECRET {catalog_secret}")
    statements.append(f"SET temp_directory = {quote_literal(temp_dir)}")
    statements.append(f"SET memory_limit = {quote_literal(memory_limit)}")
    # and what it spills: DuckDB's own bound is 90% of the free disk, which one query would take
    statements.append(f"SET max_temp_directory_size = {quote_literal(spill_limit(memory_limit))}")
    statements.append(f"SET allowed_directories = [{quote_literal(_local_dir(data_path))}]")
    if catalog_file:
        statements.append(f"SET allowed_paths = [{quote_literal(catalog_file)}]")
    statements += [
        "SET autoinstall_known_extensions = false",
        "SET autoload_known_extensions = false",
        "SET enable_external_access = false",
        "SET lock_configuration = true",  # last: nothing above can be undone from the session
    ]
    return statements
