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

ARROW = b"->>"
_BOOLEAN_CLASSES = frozenset({"CONJUNCTION", "COMPARISON"})
# what may follow the arrow as its key: a string literal, a number, a parameter
_KEY = re.compile(rb"\s*('(?:[^']|'')*'|\$\w+|\?|\d+)")
_LAST_WORD = re.compile(rb'(?:[A-Za-z_][A-Za-z0-9_$]*|"(?:[^"]|"")*")$')
_NO_LOCATION = 2**63  # DuckDB's parse tree marks a node without a place in the text with 2**64 - 1


def regrouped(text: str, tree: SqlTree, parse: Callable[[str], SqlTree]) -> tuple[str, SqlTree] | None:
    """``text`` with each arrow DuckDB read with a boolean left operand grouped with the operand
    just left of it, and its tree (``parse`` of the new text); None when no arrow was so read, or
    when a grouping cannot be placed so that DuckDB reads that very operand and key under the arrow
    (the statement then runs as written: it fails as DuckDB fails it, it never answers otherwise)."""
    raw = text.encode()  # DuckDB places nodes by byte, not by character
    changed = False
    for _ in range(raw.count(ARROW)):
        captured = list(_captured(tree))
        if not captured:
            break
        arrow = captured[0]
        operand, key = _operand(arrow["children"][0]), arrow["children"][1]
        end = _key_end(raw, arrow)
        if end is None:
            return None
        for start in _starts(raw, operand):
            candidate = raw[:start] + b"(" + raw[start:end] + b")" + raw[end:]
            try:
                new_tree = parse(candidate.decode())
            except UnicodeDecodeError:
                continue
            if not new_tree.get("error") and _holds(new_tree, operand, key) \
                    and len(list(_captured(new_tree))) < len(captured):
                raw, tree, changed = candidate, new_tree, True
                break
        else:
            return None
    return (raw.decode(), tree) if changed else None


def _captured(tree: object) -> Iterator[SqlTree]:
    """Every ``->>`` whose left operand is a boolean expression, outermost first."""
    return (arrow for arrow in _arrows(tree) if _boolean(arrow["children"][0]))


def _arrows(tree: object) -> Iterator[SqlTree]:
    """Every ``->>`` of ``tree`` (operand and key), outermost first."""
    for node in _nodes(tree):
        children = node.get("children")
        if node.get("class") == "FUNCTION" and node.get("function_name") == ARROW.decode() \
                and isinstance(children, list) and len(children) == 2:
            yield node


def _nodes(tree: object) -> Iterator[SqlTree]:
    """Every node of ``tree``, each before its parts."""
    if isinstance(tree, dict):
        yield tree
        for value in tree.values():
            yield from _nodes(value)
    elif isinstance(tree, list):
        for item in tree:
            yield from _nodes(item)


def _boolean(node: SqlTree) -> bool:
    return node.get("class") in _BOOLEAN_CLASSES or node.get("type") == "OPERATOR_NOT"


def _operand(node: SqlTree) -> SqlTree:
    """The expression just left of the arrow: down the last operand of each boolean it captured."""
    while _boolean(node):
        node = node["right"] if node.get("class") == "COMPARISON" else node["children"][-1]
    return node


def _starts(raw: bytes, node: SqlTree) -> Iterator[int]:
    """Where ``node``'s text may begin, likeliest first: the least place of it and its parts (an
    operator is placed at its operator: ``d::JSON`` at ``::``, its column before it); then, as some
    nodes are placed after their first word, that place moved back over a call's name and its
    parenthesis (``coalesce(details, …)`` is placed at ``details``) or over one word (a typed
    literal, ``JSON '{…}'``, is placed at its string). The caller keeps the one DuckDB reads back."""
    places = [place for place in _places(node) if place < _NO_LOCATION]
    if not places:
        return
    start = min(places)
    yield start
    before = raw[:start].rstrip()
    if before.endswith(b"("):
        before = before[:-1].rstrip()
    word = _LAST_WORD.search(before)
    if word:
        yield word.start()


def _places(node: SqlTree) -> Iterator[int]:
    for part in _nodes(node):
        place = part.get("query_location")
        if isinstance(place, int):
            yield place


def _key_end(raw: bytes, arrow: SqlTree) -> int | None:
    """Where the arrow's key ends in ``raw`` (the arrow is placed at its ``->>``)."""
    place = arrow.get("query_location")
    if not isinstance(place, int) or raw[place:place + len(ARROW)] != ARROW:
        return None
    found = _KEY.match(raw, place + len(ARROW))
    return found.end() if found else None


def _holds(tree: object, operand: SqlTree, key: SqlTree) -> bool:
    """Whether ``tree`` has an arrow reading ``key`` of ``operand`` (places aside)."""
    wanted = [_unplaced(operand), _unplaced(key)]
    return any(_unplaced(arrow["children"]) == wanted for arrow in _arrows(tree))


def _unplaced(node: object) -> object:
    """``node`` without its places in the text."""
    if isinstance(node, dict):
        return {name: _unplaced(value) for name, value in node.items() if name != "query_location"}
    if isinstance(node, list):
        return [_unplaced(item) for item in node]
    return node
