"""Tasks report the rows they have read to the driver's progress line over UDP
(pipeline/extract/task_reports.py): counts arrive while a slice is still reading, a slice's
count only grows, and a report that cannot be sent never stops a task."""

from __future__ import annotations

import socket
import time

import pyarrow as pa

from pipeline.extract.task_reports import ReportTo, RowsListener


def _until(condition, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "no report arrived"
        time.sleep(0.02)


def _batches(sizes):
    for size in sizes:
        yield pa.record_batch({"event_id": list(range(size))})


def test_counts_arrive_while_slices_read_and_add_up_across_slices():
    with RowsListener() as listener:
        assert listener.rows is None  # nothing heard: the tracker's task counts are used
        first = listener.address.counting(_batches([100, 200, 300]), 0, every=0)
        next(first)  # the first batch handed on; its report goes as the next is asked for
        next(first)
        _until(lambda: listener.rows == 100)  # mid-slice: the line moves before the task ends
        assert sum(b.num_rows for b in first) == 300  # the rest, unchanged
        _until(lambda: listener.rows == 600)
        second = listener.address.counting(_batches([50]), 1, every=60)  # one report, at the end
        assert sum(b.num_rows for b in second) == 50
        _until(lambda: listener.rows == 650)
        # a late datagram with an older count never takes a slice back
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as late:
            late.sendto(b"0 100", (listener.address.host, listener.address.port))
            late.sendto(b"not a report", (listener.address.host, listener.address.port))
            late.sendto(b"1 51", (listener.address.host, listener.address.port))
        _until(lambda: listener.rows == 651)
        assert listener.rows == 651


def test_a_driver_that_cannot_be_reached_costs_the_task_nothing():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed below: nobody listens there
    nowhere = ReportTo("127.0.0.1", port)
    assert sum(b.num_rows for b in nowhere.counting(_batches([10] * 50), 3, every=0)) == 500
    unresolvable = ReportTo("no-such-host.invalid", port)
    assert sum(b.num_rows for b in unresolvable.counting(_batches([10, 20]), 3, every=0)) == 30
