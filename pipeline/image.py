"""What an operation says of the image: each table's own result, by lake table, in the order the
settings list them (SOURCE_TABLES; SOURCE_TABLE is an image of one), and words for the whole."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar


class Described(Protocol):
    def describe(self) -> str: ...


R = TypeVar("R", bound=Described)


def image_watermark(tables: Iterable[tuple[datetime | None, bool]]) -> datetime | None:
    """The image's watermark from each table's (watermark, catching up): the oldest of the tables
    loaded and not catching up (one catching up, or not loaded yet, says so on its own), else the
    oldest of any — what ``--run --json`` and ``--status`` both call the watermark."""
    marks = list(tables)
    steady = [mark for mark, catching_up in marks if mark is not None and not catching_up]
    return min(steady or [mark for mark, _ in marks if mark is not None], default=None)


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
