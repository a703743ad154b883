"""Rows the arrow reader's tasks have read so far, for the driver's progress line.

Spark's status tracker only knows finished tasks, and an extraction has as many tasks as task
slots (4 on 2 cores): the line jumped 0% → 75% → 100%. So while a terminal watches, each task
sends a UDP datagram ``<slice> <rows>`` to the driver about every half second, and the driver
adds up the latest count of each slice. Best effort by design: a datagram lost, a driver an
executor cannot reach, or a full socket buffer only makes the line coarser; a task never
waits for, and never fails on, a report.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

REPORT_SECONDS = 0.5


@dataclass(frozen=True)
class ReportTo:
    """Where a task sends its counts (pickled into the task)."""

    host: str
    port: int

    def counting(self, rows: Iterator[pa.RecordBatch], index: int,
                 every: float = REPORT_SECONDS) -> Iterator[pa.RecordBatch]:
        """``rows`` unchanged, reporting slice ``index``'s running count after each batch
        (at most one report per ``every`` seconds, and one at the end)."""
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sender.setblocking(False)
        count, last = 0, time.monotonic()
        try:
            for batch in rows:
                yield batch
                count += batch.num_rows
                if time.monotonic() - last >= every:
                    self._send(sender, index, count)
                    last = time.monotonic()
            self._send(sender, index, count)
        finally:
            sender.close()

    def _send(self, sender: socket.socket, index: int, count: int) -> None:
        with contextlib.suppress(OSError):  # unreachable or full: this report is skipped
            sender.sendto(f"{index} {count}".encode(), (self.host, self.port))


class RowsListener:
    """The driver's end: ``with RowsListener(host) as listener:`` hands tasks
    :attr:`address`; :attr:`rows` is the sum of the latest count of every slice heard from."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind((host, 0))
        self._socket.settimeout(0.2)
        self.address = ReportTo(host, self._socket.getsockname()[1])
        self._latest: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, name="task-reports", daemon=True)

    @property
    def rows(self) -> int | None:
        """Rows read so far by all slices, or None before the first report."""
        latest = dict(self._latest)
        return sum(latest.values()) if latest else None

    def __enter__(self) -> RowsListener:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._socket.close()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._socket.recv(64)
            except TimeoutError:
                continue
            except OSError:
                return
            with contextlib.suppress(ValueError):  # not a report: ignored
                index, count = (int(part) for part in data.decode().split())
                # datagrams may arrive out of order: a slice's count only grows
                self._latest[index] = max(count, self._latest.get(index, 0))
