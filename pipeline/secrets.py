"""A string type for credentials that never prints its value."""

from __future__ import annotations


class Secret:
    """Wraps a credential; ``str``/``repr`` show ``***`` and only :meth:`reveal` gives it back."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __str__(self) -> str:
        return "***"

    __repr__ = __str__


MASK = "***"
