"""``--demo``: the whole story in one command on the embedded default.

Generate 10,000 events, run, run again (nothing new), add late events, run, then collect
the snapshot list, a time-travel comparison and a lake-vs-source check for the CLI to show.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from generators.events import EVENTS_PER_SESSION
from generators.writer import add_events, add_sessions
from pipeline import logs
from pipeline.errors import ConfigError, PipelineError
from pipeline.extract.engines import engine_of
from pipeline.lake.connect import lake_session
from pipeline.load.report import RunReport
from pipeline.load.verify import ImageComparison
from pipeline.ops.pipeline import Pipeline
from pipeline.settings import Settings
from pipeline.settings.model import Engine, TableSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
DEMO_SESSIONS = 200


@dataclass(frozen=True)
class DemoResult:
    runs: list[RunReport]  # first load, rerun, late events
    snapshots: list[tuple[int, datetime, str | None]]  # the latest few: id, time, commit message
    before_version: int  # the snapshot before the late events
    counts_before: dict[str, int]  # events by type AT (VERSION => before_version)
    counts_now: dict[str, int]
    comparison: ImageComparison
    # SOURCE_TABLES: sessions and their events loaded as one image, then checked at every version
    # since: (version, events without their session, sessions without all their events)
    joins: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        rerun = self.runs[1]
        return (self.comparison.equal and rerun.rows_inserted == 0 and not rerun.snapshots
                and all(orphans == 0 and short == 0 for _, orphans, short in self.joins))


def demo(settings: Settings, engine: str = "spark", spark: SparkSession | None = None) -> DemoResult:
    """Run the demo and collect what it shows."""
    table = _events_table(settings)  # refused before anything starts
    with Pipeline(settings, engine=engine, spark=spark) as pipeline:
        if engine_of(engine) is not Engine.SPARK or spark is not None:
            return _demo(pipeline, table)
        from pipeline.extract.spark_session import build_session

        # one session for the demo's three loads (a one-shot run would start its own each time)
        log.info("starting Spark (%s)…", pipeline.settings.spark.master)
        with Pipeline(pipeline.settings, engine=engine, spark=build_session(pipeline.settings)) as started:
            return _demo(started, table)


def _demo(lake: Pipeline, table: TableSpec) -> DemoResult:
    settings = lake.settings
    seed = int(datetime.now(UTC).timestamp())

    def load(step: str) -> RunReport:
        log.info(step)
        with logs.routine():  # the step's summary below says it (the run's own lines said it twice)
            report = lake.run()
        log.info("    %s", report.summary())
        return report

    log.info("1/6 generating 10,000 events into %s", table.qualified)
    log.info("    committed %d events", add_events(settings.source_dsn, table.qualified, 10_000, seed))
    first = load("2/6 loading them")  # a first run, or not: the demo may run again in a folder
    second = load("3/6 second run (expect 0 new rows, no new snapshot)")
    late_by = min(settings.lookback / 2, timedelta(minutes=5))
    log.info("4/6 adding 500 late events (%s old, inside the %s look-back)", late_by, settings.lookback)
    add_events(settings.source_dsn, table.qualified, 500, seed + 1, late_by=late_by)
    third = load("    running")

    log.info("5/6 snapshots and time travel")
    if not third.snapshots or not first.snapshots:
        raise PipelineError("The demo expected the first and the late-event runs to commit.")
    before = third.snapshots[0] - 1
    with lake_session(settings, read_only=True) as con:
        snapshots = con.execute(
            f"SELECT snapshot_id, snapshot_time, commit_message FROM {settings.lake_name}.snapshots() "
            "ORDER BY snapshot_id DESC LIMIT 8").fetchall()
        query = (f"SELECT event_type, count(*) FROM {settings.lake_table(table)} {{at}} "
                 "GROUP BY ALL ORDER BY 1")
        counts_before = dict(con.execute(query.format(at=f"AT (VERSION => {before})")).fetchall())
        counts_now = dict(con.execute(query.format(at="")).fetchall())
    comparison = lake.verify()
    log.info("%s", comparison.describe())
    joins = _one_image(lake, table.schema, seed + 2)
    with lake_session(settings, read_only=True) as con:
        snapshots = con.execute(
            f"SELECT snapshot_id, snapshot_time, commit_message FROM {settings.lake_name}.snapshots() "
            "ORDER BY snapshot_id DESC LIMIT 8").fetchall()
    return DemoResult([first, second, third], list(reversed(snapshots)), before, counts_before,
                      counts_now, comparison, joins)


def _events_table(settings: Settings) -> TableSpec:
    """The table the demo writes its events into: the one table the settings name (several are the
    user's own image, which the demo does not write into)."""
    if len(settings.tables) > 1:
        listed = ", ".join(table.qualified for table in settings.tables)
        raise ConfigError(f"The demo writes its own events into one table; SOURCE_TABLES lists {listed}.",
                          "Run the demo with SOURCE_TABLE alone (unset SOURCE_TABLES), e.g. in an empty "
                          "folder; it shows a two-table image with tables of its own.")
    return settings.tables[0]


def _one_image(lake: Pipeline, schema: str, seed: int) -> list[tuple[int, int, int]]:
    """Sessions and their events, written in one transaction each into ``schema``, loaded with
    SOURCE_TABLES in one commit; then, at every version since, the join checked both ways."""
    settings = lake.settings
    # the sessions table has its own id and time columns (generators' sql/source_sessions.sql)
    sessions = TableSpec(f"{schema}.demo_sessions", "started_at", "session_id")
    events = TableSpec(f"{schema}.demo_session_events")
    log.info("6/6 %d sessions with %d events each into %s and %s, committed together; loading both as "
             "one image (SOURCE_TABLES)", DEMO_SESSIONS, EVENTS_PER_SESSION, sessions.qualified,
             events.qualified)
    add_sessions(settings.source_dsn, sessions.qualified, events.qualified, DEMO_SESSIONS, seed)
    both = replace(settings, tables=(sessions, events))
    with lake.sibling(both) as tables, logs.routine():
        report = tables.run()
    log.info("    %s", report.summary())
    first = min(report.snapshots, default=None)
    if first is None:
        raise PipelineError("The demo expected the sessions and their events to commit.")
    lake_name = settings.lake_name
    with lake_session(settings, read_only=True) as con:
        versions = [v for (v,) in con.execute(f"SELECT snapshot_id FROM {lake_name}.snapshots() "
                                              "WHERE snapshot_id >= ? ORDER BY 1", [first]).fetchall()]
        joins = []
        for version in versions:
            at = f"AT (VERSION => {version})"
            [(orphans, short)] = con.execute(f"""
                WITH s AS (SELECT session_id FROM {lake_name}.main.{sessions.name} {at}),
                     e AS (SELECT TRY_CAST(details->>'session_id' AS UUID) AS session
                           FROM {lake_name}.main.{events.name} {at})
                SELECT (SELECT count(*) FROM e ANTI JOIN s ON s.session_id = e.session),
                       (SELECT count(*) FROM (SELECT s.session_id FROM s
                                              LEFT JOIN e ON e.session = s.session_id
                                              GROUP BY 1 HAVING count(e.session) < {EVENTS_PER_SESSION}))
                """).fetchall()
            joins.append((version, orphans, short))
    log.info("    at every version since %d: %s", first,
             "every event has its session and every session its events" if all(
                 o == 0 and s == 0 for _, o, s in joins) else "THE JOIN DOES NOT HOLD")
    return joins
