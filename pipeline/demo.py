"""``--demo``: the whole story in one command on the embedded default.

Generate 10,000 events, run, run again (nothing new), add late events, run, then show
the snapshot list, a time-travel comparison and a lake-vs-source check.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from generators.events import EventFactory
from generators.writer import write_batch
from pipeline import lake, run, services, source, verify
from pipeline.config import Settings
from pipeline.errors import PipelineError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def _generate(settings: Settings, rows: int, seed: int, late_by: timedelta | None = None) -> int:
    factory = EventFactory(seed)
    with source.connect(settings.source_dsn, autocommit=False) as conn:
        source.ensure_table(conn, settings.source_table)
        conn.commit()
        now = datetime.now(UTC)
        events = factory.batch(rows, now, late_fraction=1.0 if late_by else 0.0,
                               late_by=late_by or timedelta(0))
        return write_batch(conn, settings.source_table, events)


def demo(settings: Settings, engine: str = "spark", spark: SparkSession | None = None) -> bool:
    """Run the demo; True when the lake equals the source at the end."""
    settings = services.resolve(settings)
    seed = int(datetime.now(UTC).timestamp())
    if engine == "spark" and spark is None:
        from pipeline.spark_session import build_session

        log.info("starting Spark (%s)…", settings.spark_master)
        spark = build_session(settings)

    log.info("1/5 generating 10,000 events into %s", settings.source_table)
    log.info("    committed %d events", _generate(settings, 10_000, seed))
    log.info("2/5 first run")
    first = run.run(settings, engine=engine, spark=spark)
    log.info("    %s", first.summary())
    log.info("3/5 second run (expect 0 new rows, no new snapshot)")
    second = run.run(settings, engine=engine, spark=spark)
    log.info("    %s", second.summary())
    late_by = min(settings.lookback / 2, timedelta(minutes=5))
    log.info("4/5 adding 500 late events (%s old, inside the %s look-back) and running",
             late_by, settings.lookback)
    _generate(settings, 500, seed + 1, late_by=late_by)
    third = run.run(settings, engine=engine, spark=spark)
    log.info("    %s", third.summary())

    log.info("5/5 snapshots and time travel")
    con = lake.connect(settings, read_only=True)
    try:
        rows = con.execute(
            f"SELECT snapshot_id, snapshot_time, commit_message FROM {settings.lake_name}.snapshots() "
            "ORDER BY snapshot_id DESC LIMIT 8").fetchall()
        print("\n  snapshot  time                              commit message")
        for snapshot_id, at, message in reversed(rows):
            print(f"  {snapshot_id:>8}  {at.isoformat():32}  {message or ''}")
        if not third.snapshots or not first.snapshots:
            raise PipelineError("The demo expected the first and the late-event runs to commit.")
        before = third.snapshots[0] - 1
        query = (f"SELECT event_type, count(*) FROM {settings.events_table} {{at}} "
                 "GROUP BY ALL ORDER BY 1")
        old = dict(con.execute(query.format(at=f"AT (VERSION => {before})")).fetchall())
        now = dict(con.execute(query.format(at="")).fetchall())
    finally:
        con.close()
    print(f"\n  events by type   AT (VERSION => {before})   now    difference")
    for event_type in sorted(now):
        print(f"  {event_type:18} {old.get(event_type, 0):>12} {now[event_type]:>8} "
              f"{now[event_type] - old.get(event_type, 0):>+10}")
    print(f"  {'total':18} {sum(old.values()):>12} {sum(now.values()):>8} "
          f"{sum(now.values()) - sum(old.values()):>+10}\n")
    comparison = verify.compare(settings)
    log.info("%s", comparison.describe())
    return comparison.equal and second.rows_inserted == 0 and not second.snapshots
