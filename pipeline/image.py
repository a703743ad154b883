"""What an operation says of the image: each table's own result, by lake table, in the order the
settings list them (SOURCE_TABLES; SOURCE_TABLE is an image of one), and words for the whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class Described(Protocol):
    def describe(self) -> str: ...


R = TypeVar("R", bound=Described)


@dataclass(frozen=True)
class PerTable(Generic[R]):
    """Every table's result; a verdict of the whole is the subclass's (true only when each table's is)."""

    tables: dict[str, R]

    def describe(self) -> str:
        """A lone table's words alone (as a one-table lake always said them), else each table's, named."""
        texts = {name: result.describe() for name, result in self.tables.items()}
        if len(texts) == 1:
            return next(iter(texts.values()))
        return "\n".join(f"{name}: {text}" for name, text in texts.items())
