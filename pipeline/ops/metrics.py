"""Prometheus metrics from an :class:`~pipeline.ops.observe.Observation`.

Everything comes from the lake (``ops.batches``, the job history, snapshots) and the status
document, not from counters in this process: a restarted scheduler, a second scheduler or a
``--serve`` beside cron runs all report the same numbers, and no run is missed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import datetime

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from pipeline import actions
from pipeline.ops.observe import Observation, Observer
from pipeline.ops.status import TableStatus

PREFIX = "event_lake_"
CONTENT_TYPE = CONTENT_TYPE_LATEST

# Status attribute -> (metric name, help)
STATUS_GAUGES = {
    "lag_seconds": ("lag_seconds", "Newest source event minus the lake's watermark."),
    "source_rows_after_watermark": ("source_rows_pending", "Source rows after the watermark (not loaded)."),
    "lake_rows": ("lake_rows", "Rows in the lake's events table."),
    "snapshot_count": ("snapshots", "Snapshots kept (time travel reaches these)."),
    "data_files": ("data_files", "Live Parquet data files of the lake."),
    "data_bytes": ("data_bytes", "Bytes in the lake's live data files."),
    "staged_batches_waiting": ("staged_batches_waiting", "Complete staged batches not promoted yet."),
    "rows_quarantined": ("rows_quarantined", "Rows in ops.quarantine (they cannot be loaded)."),
    "lake_rows_not_in_source": ("rows_diverged", "Lake rows in the look-back the source deleted or moved "
                                "after loading (compared by id; repair makes lake == source)."),
    "lake_rows_changed_in_source": ("rows_changed", "Lake rows in the look-back whose contents the source "
                                    "changed after loading (same id; repair replaces them)."),
}


def families(obs: Observation) -> Iterator[Metric]:
    """The metric families of one observation (pure: no I/O)."""
    readable = obs.error is None and (obs.status is None or obs.status.source_up)
    yield _gauge("up", "1 when the lake and source could be read for this scrape.", 1 if readable else 0)
    if obs.status is not None:
        yield _gauge("source_up", "1 when the source Postgres could be read.",
                     1 if obs.status.source_up else 0)
    yield _gauge("observe_seconds", "Seconds the last read of lake and source took.", obs.seconds)
    if obs.status is None:
        return
    status, health = obs.status, obs.status.health
    yield _gauge("health", f"0 healthy, 1 stale, 2 failing (as {actions.STATUS} exits).", health.code)
    if health.seconds_since_success is not None:
        yield _gauge("seconds_since_successful_load", "Seconds since the last successful load.",
                     health.seconds_since_success)
    for attribute, (name, text) in STATUS_GAUGES.items():
        value = getattr(status, attribute)
        if value is not None:
            yield _gauge(name, text, value)
    if status.identity is not None:
        yield _gauge("rows_missing", "Source ids in the look-back the lake does not hold yet (compared by "
                     "id; the next load reads them).", len(status.identity.missing))
        if status.identity.exact:
            yield _gauge("proven_seconds", "Age of the watermark the look-back was proven through by id "
                         "(absent while lake and source differ).",
                         (obs.at - status.identity.upper).total_seconds())
    if status.integrity is not None:
        yield _gauge("damaged_files", "Registered data files missing, or changed since registered.",
                     len(status.integrity.damaged))
    yield _gauge("set_aside_batches", f"Batches set aside (fix, then {actions.RETRY_FAILED}).",
                 len(status.set_aside_batches))
    yield CounterMetricFamily(PREFIX + "rows_loaded", "Rows inserted into the lake by all batches (of "
                              "every SOURCE_TABLES table).",
                              value=obs.series.rows_loaded)
    yield CounterMetricFamily(PREFIX + "batches_promoted", "Batches promoted into the lake.",
                              value=obs.series.batches_loaded)
    changes = CounterMetricFamily(PREFIX + "schema_changes", "Changes of a source table's columns the lake "
                                  "followed (renamed, dropped, recreated; docs/schema-changes.md).",
                                  labels=["table", "change"])
    for (table, change), count in sorted(Counter((c.table, c.change) for c in status.schema_changes).items()):
        changes.add_metric([table, change], count)
    yield changes
    hour: Mapping[str, object] = status.last_hour or {}
    for key, text in (("rows_read_per_inserted", "Rows loads read per row they inserted, last hour "
                       "(about 1 when they read only what arrived)."),
                      ("freshness_p50_seconds", "Median seconds from arrival to commit, last hour."),
                      ("freshness_p95_seconds", "Highest p95 of seconds from arrival to commit, last hour."),
                      ("rows_behind_mark", "Rows loads found had arrived behind the arrival mark, last "
                       "hour (created_at is not the database's clock; read with the whole look-back).")):
        value = hour.get(key)
        if value is not None:
            yield _gauge(key, text, float(str(value)))  # a DuckDB aggregate may be a Decimal
    # a history read in parts: each table's (SOURCE_TABLE's one under the lake table's name)
    yield from _history_families(status.tables or {status.lake.rsplit(".", 1)[-1]: status.part()})
    if status.tables:
        yield from _table_families(status.tables)
        loaded = CounterMetricFamily(PREFIX + "table_rows_loaded", "Rows inserted into the table's lake "
                                     "table by all batches.", labels=["table"])
        for table, (rows, _) in obs.series.by_table.items():
            loaded.add_metric([table], rows)
        yield loaded
    if obs.series.batches:
        yield _gauge("last_batch_lag_seconds", "Age of the newest event of the last batch when it "
                     "became queryable.", obs.series.batches[-1]["lag_seconds"] or 0)
    yield from _job_families(obs)


def _table_families(tables: Mapping[str, TableStatus]) -> Iterator[Metric]:
    """SOURCE_TABLES: each table's rows, lag, pending rows and health, by a ``table`` label."""
    for attribute, name, text in (("lake_rows", "table_lake_rows", "Rows in the table's lake table."),
                                  ("lag_seconds", "table_lag_seconds", "Newest source row minus the "
                                   "table's watermark."),
                                  ("source_rows_after_watermark", "table_source_rows_pending",
                                   "Source rows after the table's watermark (not loaded).")):
        family = GaugeMetricFamily(PREFIX + name, text, labels=["table"])
        for table, status in tables.items():
            value = getattr(status, attribute)
            if value is not None:
                family.add_metric([table], float(value))
        yield family
    health = GaugeMetricFamily(PREFIX + "table_health", "The table's health: 0 healthy, 1 stale, 2 failing.",
                               labels=["table"])
    for table, status in tables.items():
        health.add_metric([table], status.health.code)
    yield health


def _history_families(tables: Mapping[str, TableStatus]) -> Iterator[Metric]:
    """While a table's history is read in parts: its rows loaded, its total and the time left."""
    for key, name, text in (
            ("rows_loaded", "history_rows_loaded", "Rows of the table's history in the lake."),
            ("rows_total", "history_rows_total", "Rows of the table's history in all (the lake's and the "
             "source's after its watermark)."),
            ("eta_seconds", "history_eta_seconds", "Seconds until its history is read, at the rate its parts "
             "were read.")):
        family = GaugeMetricFamily(PREFIX + name, text, labels=["table"])
        for table, status in tables.items():
            value = status.history.as_dict()[key] if status.history else None
            if value is not None:
                family.add_metric([table], float(str(value)))
        yield family


def _job_families(obs: Observation) -> Iterator[Metric]:
    runs = CounterMetricFamily(PREFIX + "job_runs", "Job runs by result (failed: the failures).",
                               labels=["task", "status"])
    last_success = GaugeMetricFamily(PREFIX + "job_last_success_timestamp_seconds",
                                     "When the job last succeeded (Unix time).", labels=["task"])
    duration = GaugeMetricFamily(PREFIX + "job_last_duration_seconds", "Duration of the job's last run.",
                                 labels=["task"])
    for row in obs.series.job_totals:
        for status in ("succeeded", "failed", "other"):
            runs.add_metric([row["job"], {"succeeded": "success"}.get(status, status)], row[status])
        if isinstance(row["last_success"], datetime):
            last_success.add_metric([row["job"]], row["last_success"].timestamp())
        if row["last_seconds"] is not None:
            duration.add_metric([row["job"]], row["last_seconds"])
    yield from (runs, last_success, duration)


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, text, value=float(value))


class LakeCollector(Collector):
    """Asks the observer at scrape time (cached by the observer, not here)."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer

    def collect(self) -> Iterator[Metric]:
        return families(self.observer.latest())


def exposition(observer: Observer) -> bytes:
    """The text a Prometheus scrape of ``/metrics`` gets."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LakeCollector(observer))
    return generate_latest(registry)
