"""Why ``--follow`` is a loop over the run and not Spark Structured Streaming: what each costs per
micro-batch, measured in one Spark session.

    uv run --dev python bench/bench_streaming.py --batches 30 --rows 2000

* Structured Streaming's floor: a Python streaming data source (``DataSourceStreamReader``, the
  API a planner-backed source would use: offsets, one partition per micro-batch) that moves one
  row per micro-batch into ``foreachBatch`` doing nothing — so every millisecond is the engine's
  own: offset log and commit log in the checkpoint, planning, a job per micro-batch.
* The loop: ``run()`` as ``--follow`` calls it (one Spark session, the lake attached once per process),
  each time after writing --rows new events: plan, extract with Spark, promote — real work.
Prints p50/p95 seconds per micro-batch for both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import drop_databases, print_table, scratch_settings


def streaming_floor(spark, batches: int) -> list[float]:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class Ticks(DataSourceStreamReader):
        def __init__(self) -> None:
            self.n = 0

        def initialOffset(self) -> dict:
            return {"n": 0}

        def latestOffset(self) -> dict:
            self.n += 1  # one new row per micro-batch, like a source that always has arrivals
            return {"n": self.n}

        def partitions(self, start: dict, end: dict) -> list[InputPartition]:
            return [InputPartition(end["n"])]

        def read(self, partition: InputPartition):
            yield (partition.value,)

    class TickSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ticks"

        def schema(self) -> str:
            return "n long"

        def streamReader(self, schema) -> DataSourceStreamReader:
            return Ticks()

    spark.dataSource.register(TickSource)
    with tempfile.TemporaryDirectory(prefix="el-stream-") as checkpoint:
        query = (spark.readStream.format("ticks").load().writeStream
                 .foreachBatch(lambda frame, batch_id: None)
                 .trigger(processingTime="0 seconds").option("checkpointLocation", checkpoint).start())
        while len(query.recentProgress) < batches + 3:
            time.sleep(0.5)
        query.stop()
        progress = query.recentProgress[3:batches + 3]  # past the first (Python worker start)
    return [p["durationMs"]["triggerExecution"] / 1000 for p in progress]


def loop_loads(spark, settings, batches: int, rows: int) -> list[float]:
    from tests.helpers import add_events, run

    add_events(settings, rows, seed=1)
    run(settings, spark=spark)  # the first load: tables, first files; the lake stays attached (instances)
    seconds = []
    for i in range(batches):
        add_events(settings, rows, seed=2 + i)
        t0 = time.monotonic()
        report = run(settings, spark=spark)
        seconds.append(time.monotonic() - t0)
        assert report.rows_inserted == rows, report.summary()
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--rows", type=int, default=2000, help="new events per load of the loop")
    args = parser.parse_args()
    from pipeline import embedded
    from pipeline.extract.spark_session import build_session

    with tempfile.TemporaryDirectory(prefix="el-loop-") as tmp:
        settings, dbs = scratch_settings(Path(tmp))
        try:
            settings = embedded.resolved(settings)
            spark = build_session(settings, app_name="bench-streaming")
            floor = sorted(streaming_floor(spark, args.batches))
            loads = sorted(loop_loads(spark, settings, args.batches, args.rows))
            spark.stop()
        finally:
            drop_databases(dbs)

    def p(values: list[float], share: float) -> str:
        return f"{values[min(len(values) - 1, int(share * len(values)))]:.2f}"

    print_table(f"Seconds per micro-batch, {args.batches} each, one local Spark session (2 cores)", [
        ("Structured Streaming, Python source, 1 row, no-op sink: p50 / p95 / mean",
         f"{p(floor, 0.5)} / {p(floor, 0.95)} / {statistics.mean(floor):.2f}"),
        (f"--follow's loop, {args.rows:,} new rows, plan+extract+promote: p50 / p95 / mean",
         f"{p(loads, 0.5)} / {p(loads, 0.95)} / {statistics.mean(loads):.2f}"),
    ])
    return 0


if __name__ == "__main__":
    sys.exit(main())
