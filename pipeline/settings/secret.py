"""A string type for credentials that never prints its value (named so it does not shadow
the standard library's ``secrets``)."""

from __future__ import annotations

from pipeline.errors import MASK


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
        return MASK

    __repr__ = __str__
