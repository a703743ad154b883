"""What a source without a unique index on event_id costs at promotion: a batch's ids checked
against every lake row instead of the batch's own time range (pipeline.promote.promotion.insert_sql).

    uv run --dev python bench/bench_antijoin.py --lake-rows 1000000 10000000 --batch 1000

A lake of N rows in one DuckLake table (day-partitioned like the events table, on a DuckDB
catalog file in a temp folder) takes the promotion's insert of a batch of new ids, both ways,
three times each inside a transaction that is rolled back; the table prints the median seconds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import duckdb


def _lake(folder: Path, rows: int) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("LOAD ducklake")
    con.execute(f"ATTACH 'ducklake:{folder}/catalog.ducklake' AS lake (DATA_PATH '{folder}/data/')")
    con.execute("CREATE TABLE lake.events (event_id UUID, event_type VARCHAR, event_timestamp TIMESTAMPTZ)")
    con.execute("ALTER TABLE lake.events SET PARTITIONED BY (year(event_timestamp), month(event_timestamp), "
                "day(event_timestamp))")
    con.execute(f"INSERT INTO lake.events SELECT uuid(), 'click', TIMESTAMPTZ '2026-01-01' + "
                f"to_seconds(range * (86400 * 30 // {rows})) FROM range({rows})")
    return con


def _insert(con: duckdb.DuckDBPyConnection, batch: int, whole_lake: bool) -> float:
    in_range = "" if whole_lake else "WHERE event_timestamp BETWEEN $lo AND $hi"
    params = {} if whole_lake else {"lo": "2026-01-31 00:00:00+00", "hi": "2026-01-31 00:15:00+00"}
    con.execute("BEGIN")
    started = time.perf_counter()
    con.execute(f"""INSERT INTO lake.events SELECT s.* FROM (
        SELECT uuid() AS event_id, 'click' AS event_type,
               TIMESTAMPTZ '2026-01-31 00:00:00+00' + to_seconds(range % 900) AS event_timestamp
        FROM range({batch})) s
        ANTI JOIN (SELECT event_id FROM lake.events {in_range}) existing ON existing.event_id = s.event_id""",
                params)
    seconds = time.perf_counter() - started
    con.execute("ROLLBACK")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake-rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    header = ("lake rows", "batch", "range anti-join s", "whole-lake anti-join s", "ratio")
    print(f"{header[0]:>12} {header[1]:>7} {header[2]:>18} {header[3]:>23} {header[4]:>7}")
    for rows in args.lake_rows:
        with tempfile.TemporaryDirectory() as folder:
            con = _lake(Path(folder), rows)
            ranged = statistics.median(_insert(con, args.batch, False) for _ in range(3))
            whole = statistics.median(_insert(con, args.batch, True) for _ in range(3))
            con.close()
        ratio = whole / ranged
        print(f"{rows:>12,} {args.batch:>7} {ranged:>18.3f} {whole:>23.3f} {ratio:>6.1f}x", flush=True)


if __name__ == "__main__":
    main()
