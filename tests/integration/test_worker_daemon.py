"""A local Spark's Python workers start from a daemon that imported pyspark byte-compiled (not
from Spark's zip, compiled from source in every daemon) and the slice task's modules before forking."""

from collections.abc import Iterator

import pyarrow as pa


def test_local_workers_run_the_installed_pyspark_with_the_task_modules_loaded_and_frozen(spark) -> None:
    def facts(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import gc
        import sys

        import pyspark

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({
            "pyspark": [pyspark.__file__], "frozen": [gc.get_freeze_count()],
            "task_loaded": ["pipeline.extract.slice_task" in sys.modules]})

    schema = "pyspark string, frozen long, task_loaded boolean"
    rows = spark.range(0, 2, 1, 2).mapInArrow(facts, schema).collect()
    assert len(rows) == 2
    for row in rows:
        assert ".zip" not in row.pyspark and row.pyspark.endswith("pyspark/__init__.py"), row
        assert row.frozen > 0 and row.task_loaded, row
