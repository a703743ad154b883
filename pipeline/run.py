"""One pipeline run: promote leftovers, plan the window, extract a batch, promote it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pipeline import faults, lake, promote, services, source, staging, state
from pipeline.config import Settings
from pipeline.errors import ConfigError
from pipeline.extract import Extractor, ExtractRequest, extract
from pipeline.promote import PromotionResult
from pipeline.window import Window, plan_window

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
Mode = Literal["run", "extract", "promote"]
ENGINES = ("spark", "dlt")


@dataclass
class RunReport:
    """What a run did, for the last line of output and for tests."""

    window: Window | None = None
    rows_in_window: int = 0
    staged_batch: str | None = None
    promotions: list[PromotionResult] = field(default_factory=list)
    watermark: datetime | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def rows_inserted(self) -> int:
        return sum(p.rows_inserted for p in self.promotions)

    @property
    def snapshots(self) -> list[int]:
        return [p.snapshot_id for p in self.promotions if p.snapshot_id is not None]

    def summary(self) -> str:
        parts = []
        if self.staged_batch:
            parts.append(f"staged {self.rows_in_window} rows as batch {self.staged_batch}")
        elif self.window is not None:
            parts.append(f"no new events in window {self.window.describe()}")
        if self.promotions:
            committed = [p for p in self.promotions if p.outcome == "committed"]
            parts.append(f"promoted {len(committed)} of {len(self.promotions)} batch(es), "
                         f"{self.rows_inserted} new rows"
                         + (f", snapshot(s) {', '.join(map(str, self.snapshots))}"
                            if self.snapshots else ", no new snapshot"))
        if self.watermark:
            parts.append(f"watermark {self.watermark.isoformat()}")
        return "; ".join(parts) or "nothing to do"


def make_extractor(engine: str, settings: Settings, spark: SparkSession | None = None) -> Extractor:
    if engine == "spark":
        from pipeline.extract_spark import SparkExtractor
        from pipeline.spark_session import build_session

        return SparkExtractor(spark or build_session(settings))
    if engine == "dlt":
        from pipeline.extract_dlt import DltExtractor

        return DltExtractor()
    raise ConfigError(f"Unknown engine {engine!r}.", f"Use one of: {', '.join(ENGINES)}.")


def promote_pending(settings: Settings, report: RunReport) -> None:
    """Promote complete staged batches left by earlier runs (oldest first)."""
    for batch in staging.complete_batches(settings.staging_table_dir):
        log.info("promoting staged batch %s (%d rows)", batch.batch_id, batch.manifest.row_count)
        report.promotions.append(promote.promote(settings, batch))


def run(settings: Settings, mode: Mode = "run", engine: str = "spark",
        spark: SparkSession | None = None,
        spark_factory: Callable[[], SparkSession] | None = None) -> RunReport:
    """Run the pipeline once. ``spark`` (or ``spark_factory``, called only when there is
    something to extract) lets callers such as tests and the scheduler reuse a session."""
    settings = services.resolve(settings)
    report = RunReport()
    started = time.monotonic()
    removed = staging.clean_stale(settings.staging_table_dir)
    for path in removed:
        log.info("removed stale incomplete batch %s", path.name)
    if mode in ("run", "promote"):
        promote_pending(settings, report)
    if mode in ("run", "extract"):
        batch = _extract_new(settings, engine, spark, spark_factory, report)
        if batch is not None and mode == "run":
            faults.maybe_crash("after-stage")
            t0 = time.monotonic()
            report.promotions.append(promote.promote(settings, batch))
            report.seconds["promote"] = time.monotonic() - t0
        elif batch is not None:
            faults.maybe_crash("after-stage")
    con = lake.connect(settings, read_only=True)
    try:
        has_state = (settings.ops_schema, "batches") in lake.table_names(con, settings)
        report.watermark = state.watermark(con, settings) if has_state else None
    finally:
        con.close()
    report.seconds["total"] = time.monotonic() - started
    return report


def _extract_new(settings: Settings, engine: str, spark: SparkSession | None,
                 spark_factory: Callable[[], SparkSession] | None,
                 report: RunReport) -> staging.StagedBatch | None:
    t0 = time.monotonic()
    con = lake.connect(settings)
    try:
        lake.ensure_tables(con, settings)
        watermark = state.watermark(con, settings)
    finally:
        con.close()
    with source.connect(settings.source_dsn) as conn:
        upper = source.server_now(conn)
        window = plan_window(watermark, settings.lookback, upper)
        stats = source.window_stats(conn, settings.source_table, window)
    report.window, report.rows_in_window = window, stats.rows
    report.seconds["plan"] = time.monotonic() - t0
    if stats.rows == 0:
        log.info("no new events in window %s", window.describe())
        return None
    log.info("extracting %d rows in window %s with %s", stats.rows, window.describe(), engine)
    t0 = time.monotonic()
    if spark is None and spark_factory is not None and engine == "spark":
        spark = spark_factory()
    extractor = make_extractor(engine, settings, spark)
    report.seconds["engine_start"] = time.monotonic() - t0
    t0 = time.monotonic()
    request = ExtractRequest(settings, window, stats, staging.new_batch_id())
    batch = extract(extractor, request)
    report.seconds["extract"] = time.monotonic() - t0
    report.staged_batch, report.rows_in_window = batch.batch_id, batch.manifest.row_count
    log.info("staged batch %s: %d rows in %d file(s) (%.2fs)", batch.batch_id,
             batch.manifest.row_count, len(batch.manifest.files), report.seconds["extract"])
    return batch
