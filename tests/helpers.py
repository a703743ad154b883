"""Small helpers the pipeline tests share: write events, count snapshots, compare."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from generators.events import EventFactory
from generators.writer import write_batch
from pipeline import lake, services, source, verify
from pipeline.config import Settings


def add_events(settings: Settings, rows: int, seed: int, *, late_by: timedelta | None = None,
               now: datetime | None = None) -> int:
    settings = services.resolve(settings)
    factory = EventFactory(seed)
    with source.connect(settings.source_dsn, autocommit=False) as conn:
        source.ensure_table(conn, settings.source_table)
        conn.commit()
        events = factory.batch(rows, now or datetime.now(UTC), late_fraction=1.0 if late_by else 0.0,
                               late_by=late_by or timedelta(0))
        return write_batch(conn, settings.source_table, events)


def snapshot_ids(settings: Settings) -> list[int]:
    con = lake.connect(services.resolve(settings), read_only=True)
    try:
        return [r[0] for r in con.execute(
            f"SELECT snapshot_id FROM {settings.lake_name}.snapshots() ORDER BY 1").fetchall()]
    finally:
        con.close()


def data_snapshots(settings: Settings) -> list[int]:
    """Snapshots that inserted into the events table."""
    con = lake.connect(services.resolve(settings), read_only=True)
    try:
        return [r[0] for r in con.execute(
            f"SELECT snapshot_id FROM {settings.lake_name}.snapshots() "
            "WHERE changes['tables_inserted_into'] IS NOT NULL ORDER BY 1").fetchall()]
    finally:
        con.close()


def assert_lake_equals_source(settings: Settings, expected_rows: int | None = None) -> None:
    comparison = verify.compare(services.resolve(settings))
    assert comparison.equal, comparison.describe()
    if expected_rows is not None:
        assert comparison.lake.rows == expected_rows, comparison.describe()
