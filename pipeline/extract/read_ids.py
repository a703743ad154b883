"""The ids a reader read, summed as the identity proof sums them (:mod:`pipeline.id_checksum`), on
the rows in hand: a part of a history proves itself from its own read, with no second scan of the
source (the plan's walk counted the part, so a slice that misses or repeats a row fails the
extraction's row check; :func:`pipeline.extract.batch.extract`).

Only UUID ids are summed here (as Postgres's uuid, or its text: 36 characters); anything else says
None and the proof is summed in the source instead, as for any window. Runs on the executors
(numpy and pyarrow only).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.id_checksum import IdSum

_HEX = np.full(256, 255, dtype=np.uint8)
for _digit, _value in zip(b"0123456789abcdef", range(16), strict=True):
    _HEX[_digit] = _value
for _digit, _value in zip(b"ABCDEF", range(10, 16), strict=True):
    _HEX[_digit] = _value
# the 32 hex digits of a UUID's text (8-4-4-4-12)
_DIGITS = np.array([i for i in range(36) if i not in (8, 13, 18, 23)])


def of_batch(batch: pa.RecordBatch | pa.Table, upper: datetime) -> IdSum | None:
    """The ids (count and sums, :class:`IdSum`) of ``batch``'s rows with an id and a time at or
    before ``upper`` (rows without a time belong to no range; rows a window pulled from after it
    belong to a later one)."""
    ids, times = batch.column("event_id"), batch.column("event_timestamp")
    dated = pc.and_(pc.is_valid(ids), pc.less_equal(times, pa.scalar(upper, times.type)))
    chosen = pc.filter(ids, pc.fill_null(dated, False))
    if isinstance(chosen, pa.ChunkedArray):
        chosen = chosen.combine_chunks()
    if isinstance(chosen, pa.ExtensionArray):
        chosen = chosen.storage
    if len(chosen) == 0:
        return IdSum()
    halves: np.ndarray | None = None
    if pa.types.is_fixed_size_binary(chosen.type) and chosen.type.byte_width == 16:
        halves = np.frombuffer(chosen.buffers()[1], dtype=">u8", count=2 * len(chosen),
                               offset=16 * chosen.offset).reshape(-1, 2).astype(np.uint64)
    elif pa.types.is_string(chosen.type):
        halves = _text_halves(chosen)
    if halves is None:
        return None
    high, low = (int(halves[:, half].sum(dtype=np.uint64)) for half in (0, 1))
    return IdSum.of(len(chosen), high, low)


def _text_halves(ids: pa.StringArray) -> np.ndarray | None:
    """The halves of UUIDs as Postgres's uuid::text spells them (36 characters, lower case)."""
    offsets = np.frombuffer(ids.buffers()[1], dtype=np.int32, count=len(ids) + 1, offset=4 * ids.offset)
    if not (np.diff(offsets) == 36).all():
        return None
    text = np.frombuffer(ids.buffers()[2], dtype=np.uint8, count=36 * len(ids), offset=int(offsets[0]))
    nibbles = _HEX[text.reshape(-1, 36)[:, _DIGITS]]
    if (nibbles == 255).any():
        return None
    octets = np.ascontiguousarray((nibbles[:, 0::2] << 4) | nibbles[:, 1::2])
    return octets.view(">u8").astype(np.uint64)


class Tally:
    """Sums the ids of the batches passing :meth:`through` (a slice's reader): :attr:`total` once
    they have passed, None when one held ids this module cannot sum."""

    def __init__(self, upper: datetime) -> None:
        self.upper = upper
        self.total: IdSum | None = IdSum()

    def through(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if self.total is not None:
                summed = of_batch(batch, self.upper)
                self.total = None if summed is None else self.total + summed
            yield batch


def as_columns(ids: IdSum | None) -> dict[str, list[int | None]]:
    """``ids`` as a task's result columns (Spark's longs: the sums as signed 64-bit integers)."""
    if ids is None:
        return {"ids": [None], "id_high": [None], "id_low": [None]}
    return {"ids": [ids.count], "id_high": [_signed(ids.high)], "id_low": [_signed(ids.low)]}


def of_results(rows: list[tuple[int | None, int | None, int | None]]) -> IdSum | None:
    """The sum of the tasks' ``(ids, id_high, id_low)``; None when any task did not sum."""
    total = IdSum()
    for count, high, low in rows:
        if count is None or high is None or low is None:
            return None
        total = total + IdSum.of(count, high, low)
    return total


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value
