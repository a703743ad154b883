"""``->>`` read as people write it: its left operand is the expression just left of it.

DuckDB 1.5 parses the arrow with a looser left side than AND, OR, NOT and the comparisons:
``event_type = 'error_occurred' AND details->>'severity' = 'critical'`` is read as
``((event_type = 'error_occurred' AND details) ->> 'severity') = 'critical'``, which fails
("Failed to cast value to numerical: {…} when casting from source column details") or matches
nothing; ``details->>'a' = 'x' AND details->>'b' = 'y'`` too. The seed's own change-feed question
is written that way, and users do not rewrite their queries. A read-only session therefore groups
such an arrow with the operand just left of it, as PostgreSQL does, and runs (and judges) that.

Only an arrow whose left operand DuckDB parsed as a boolean (a conjunction, a comparison, a NOT:
never a JSON value, so the statement as parsed could only fail or match nothing) is regrouped; any
other statement runs exactly as written. Pure but for the parse, which the caller passes in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from pipeline.sql_session.typed_rewrite import SqlTree

ARROW = "->>"
_BOOLEAN_CLASSES = frozenset({"CONJUNCTION", "COMPARISON"})
# what may follow the arrow as its key: a string literal, a number, a parameter
_KEY = re.compile(r"\s*('(?:[^']|'')*'|\$\w+|\?|\d+)")
_NO_LOCATION = 2**63  # DuckDB's parse tree marks a node without a place in the text with 2**64 - 1


def regrouped(text: str, tree: SqlTree, parse: Callable[[str], SqlTree]) -> tuple[str, SqlTree] | None:
    """``text`` with each arrow DuckDB read with a boolean left operand grouped with the operand
    just left of it, and its tree (``parse`` of the new text); None when no arrow was so read, or
    when a grouping cannot be placed in the text (the statement then runs as written)."""
    changed = False
    for _ in range(text.count(ARROW)):
        arrow = next(_captured(tree), None)
        if arrow is None:
            break
        start = _start(_operand(arrow["children"][0]))
        end = _key_end(text, arrow)
        if start is None or end is None:
            return None
        text = f"{text[:start]}({text[start:end]}){text[end:]}"
        tree, changed = parse(text), True
        if tree.get("error"):  # not placed as meant: the statement runs as written
            return None
    return (text, tree) if changed else None


def _captured(node: object) -> Iterator[SqlTree]:
    """Every ``->>`` whose left operand is a boolean expression, outermost first."""
    if isinstance(node, dict):
        children = node.get("children")
        if node.get("class") == "FUNCTION" and node.get("function_name") == ARROW \
                and isinstance(children, list) and len(children) == 2 and _boolean(children[0]):
            yield node
        for value in node.values():
            yield from _captured(value)
    elif isinstance(node, list):
        for item in node:
            yield from _captured(item)


def _boolean(node: SqlTree) -> bool:
    return node.get("class") in _BOOLEAN_CLASSES or node.get("type") == "OPERATOR_NOT"


def _operand(node: SqlTree) -> SqlTree:
    """The expression just left of the arrow: down the last operand of each boolean it captured."""
    while _boolean(node):
        node = node["right"] if node.get("class") == "COMPARISON" else node["children"][-1]
    return node


def _start(node: SqlTree) -> int | None:
    """Where ``node``'s text begins: the least place of it and its parts (an operator's own place is
    its operator's: ``d::JSON`` is placed at ``::``, its column before it)."""
    places = [place for place in _places(node) if place < _NO_LOCATION]
    return min(places) if places else None


def _places(node: object) -> Iterator[int]:
    if isinstance(node, dict):
        place = node.get("query_location")
        if isinstance(place, int):
            yield place
        for value in node.values():
            yield from _places(value)
    elif isinstance(node, list):
        for item in node:
            yield from _places(item)


def _key_end(text: str, arrow: SqlTree) -> int | None:
    """Where the arrow's key ends in ``text`` (the arrow is placed at its ``->>``)."""
    place = arrow.get("query_location")
    if not isinstance(place, int) or text[place:place + len(ARROW)] != ARROW:
        return None
    found = _KEY.match(text, place + len(ARROW))
    return found.end() if found else None
