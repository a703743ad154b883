"""Query time and data-file count on a lake built from many small hourly batches, before and
after compaction (flush inlined rows + merge adjacent files).

    uv run --dev python bench/bench_compaction.py --batches 240 --rows 2000

Each batch is promoted with the real promotion code, one hour apart in event time (as the
hourly scheduler produces them), so the lake ends up with one small file per batch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_table, scratch_lake, stage_synthetic_batch
from pipeline.lake import connect as lake
from pipeline.lake import maintain
from pipeline.promote import promotion as promote

QUERIES = {
    "count by type, last 24h": "SELECT event_type, count(*) FROM lake.main.events "
    "WHERE event_timestamp > (SELECT max(event_timestamp) FROM lake.main.events) - INTERVAL 1 DAY GROUP BY 1",
    "payments by day": "SELECT date_trunc('day', event_timestamp) d, count(*), "
    "sum((details->>'amount')::DOUBLE) FROM lake.main.events "
    "WHERE event_type = 'payment_processed' GROUP BY 1",
    "one user's journey": "SELECT event_timestamp, event_type FROM lake.main.events "
    "WHERE (details->>'user_id') = 'user_42' ORDER BY 1",
    "full count + distinct ids": "SELECT count(*), count(DISTINCT event_id) FROM lake.main.events",
}


def time_queries(settings, repeat: int) -> dict[str, float]:
    con = lake.connect(settings, read_only=True)
    try:
        out = {}
        for name, sql in QUERIES.items():
            runs = []
            for _ in range(repeat):
                t0 = time.monotonic()
                con.execute(sql).fetchall()
                runs.append(time.monotonic() - t0)
            out[name] = statistics.median(runs)
        return out
    finally:
        con.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=240, help="Hourly batches (default 240 = 10 days).")
    parser.add_argument("--rows", type=int, default=2000, help="Events per batch.")
    parser.add_argument("--repeat", type=int, default=5, help="Runs per query (median kept).")
    args = parser.parse_args()
    with scratch_lake("el-compact-") as (settings, con):
        start = datetime.now(UTC) - timedelta(hours=args.batches)
        t0 = time.monotonic()
        for i in range(args.batches):
            batch = stage_synthetic_batch(con, settings, args.rows, start + timedelta(hours=i))
            promote.promote_together(batch.batch_id, [(con, batch)])
        build = time.monotonic() - t0
        files_before = maintain.data_file_count(con.lake)
        before = time_queries(settings, args.repeat)
        report = maintain.run_maintenance(settings, timedelta(0))
        after = time_queries(settings, args.repeat)
        rows = [("batches x rows", f"{args.batches} x {args.rows}"),
                ("build s (promotions)", f"{build:.1f}"),
                ("data files before", str(files_before)),
                ("data files after", str(report.files_after)),
                ("maintenance s", f"{report.seconds:.1f}")]
        for name in QUERIES:
            rows.append((f"{name}: ms before / after",
                         f"{before[name] * 1000:.0f} / {after[name] * 1000:.0f}"))
        print_table("Compaction of many small hourly batches", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
