"""Does promotion stay flat as the lake grows? Time promoting one batch into lakes of two sizes.

    uv run --dev python bench/bench_promote_scaling.py --batch 100000 --sizes 1000000 10000000

For each promotion mode (copy, zero-copy) and size: a fresh lake is filled with synthetic
events spread over the past 30 days (written straight through DuckDB, not through the
pipeline, to keep the bench short), then
one staged batch of --batch events in the last hour (10% of them already in the lake, as
the look-back produces) is promoted with the real promotion code. Prints seconds per size
and the ratio to the smallest lake.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_table, scratch_lake, stage_synthetic_batch
from pipeline.promote import promotion as promote

SYNTHETIC = """
    SELECT uuid() AS event_id, 'api_request' AS event_type,
           $now::TIMESTAMPTZ - to_seconds(CAST(i * $span / $n AS BIGINT)) AS event_timestamp,
           '{"endpoint": "/api/v1/orders", "status_code": 200}' AS details, $now::TIMESTAMPTZ AS created_at
    FROM range($n) t(i)
"""


def fill_lake(table, settings, rows: int, now: datetime) -> None:
    table.lake.execute(f"INSERT INTO {settings.lake_table(settings.tables[0])} "
                f"(event_id, event_type, event_timestamp, details, created_at) {SYNTHETIC}",
                {"now": now, "span": 30 * 86400, "n": rows})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--repeat", type=int, default=3, help="Batches promoted per size (best kept).")
    parser.add_argument("--modes", nargs="+", default=["copy", "zero-copy"], choices=["copy", "zero-copy"])
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []
    for mode in args.modes:
        rows += scaling(mode, args)
    print_table("Promotion time vs lake size", rows)
    return 0


def scaling(mode: str, args: argparse.Namespace) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    timings: dict[int, float] = {}
    for size in args.sizes:
        with scratch_lake("el-scale-", promotion=mode) as (settings, con):
            now = datetime.now(UTC)
            t0 = time.monotonic()
            fill_lake(con, settings, size, now)
            fill = time.monotonic() - t0
            best = float("inf")
            for _ in range(args.repeat):
                batch = stage_synthetic_batch(con, settings, args.batch, now, overlap=args.batch // 10)
                [result] = promote.promote_together(batch.batch_id, [(con, batch)])
                assert result.outcome == "committed", result.describe()
                best = min(best, result.seconds)
            timings[size] = best
            rows.append((f"{mode}: lake {size:,} rows: fill s", f"{fill:.1f}"))
            rows.append((f"{mode}: lake {size:,} rows: promote {args.batch:,} s (best of {args.repeat})",
                         f"{best:.2f}"))
    base = timings[args.sizes[0]]
    for size in args.sizes[1:]:
        rows.append((f"{mode}: ratio {size:,} / {args.sizes[0]:,}", f"{timings[size] / base:.2f}"))
    return rows


if __name__ == "__main__":
    sys.exit(main())
