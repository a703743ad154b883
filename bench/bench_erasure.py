"""Benchmark an erasure (``--erase``) on a loaded lake: the seconds, files rewritten, bytes written
and time travel it costs.

    uv run --dev python bench/bench_erasure.py --rows 10000000 [--users 10000] [--loads 4]

The source table is made with ``generate_series`` (events over 30 days; ``details.user_id`` one of
``--users``, so one subject holds rows/users of them: 0.01 % with the defaults), loaded in ``--loads``
runs (the history first, then the rest in equal slices, as a lake grows: several snapshots and
files per day), with SUBJECT_KEY=details.user_id. Then ``--erase user_42 --dry-run`` and
``--erase user_42 --yes``, each as a user runs it (``--json``, a process of its own): wall and CPU
seconds, peak RSS, and what the report says. Uses BENCH_PG_DSN (default the local Postgres).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import EVENTS_TABLE_SQL, ROOT, drop_databases, measured, print_table, scratch_env

SLICE_SQL = """
INSERT INTO public.events (event_id, event_type, event_timestamp, details)
SELECT gen_random_uuid(), (ARRAY['page_view','click','purchase','signup'])[1 + i % 4],
       now() - interval '1 hour' - (({rows} - i) * (interval '30 days' / {rows})),
       jsonb_build_object('user_id', 'user_' || (i % {users}), 'n', i)
FROM generate_series({first}, {last}) i
"""


def run(args: list[str], env: dict[str, str]) -> tuple[dict, float, float, int]:
    command = [sys.executable, str(ROOT / "events_pipeline.py"), *args, "--json"]
    result, wall, cpu, rss = measured(command, env)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout), wall, cpu, rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=4)
    parser.add_argument("--subject", default="user_42")
    options = parser.parse_args()
    import psycopg

    with tempfile.TemporaryDirectory(prefix="bench-erasure-") as work:
        env, names = scratch_env(Path(work))
        env |= {"SUBJECT_KEY": "details.user_id", "ERASURE_KEY": "bench-erasure-key",
                "BACKFILL_BATCH_ROWS": "0"}
        try:
            t0 = time.monotonic()
            with psycopg.connect(env["SOURCE_PG_DSN"], autocommit=True) as conn:
                conn.execute(EVENTS_TABLE_SQL)
                step = options.rows // options.loads
                for part in range(options.loads):
                    first = part * step + 1
                    last = options.rows if part == options.loads - 1 else (part + 1) * step
                    conn.execute(SLICE_SQL.format(rows=options.rows, users=options.users, first=first,
                                                  last=last))
                    conn.execute("VACUUM (ANALYZE) public.events")
                    run(["--run"], env)
            made = time.monotonic() - t0
            dry, dry_wall, dry_cpu, dry_rss = run(["--erase", options.subject, "--dry-run"], env)
            done, wall, cpu, rss = run(["--erase", options.subject, "--yes"], env)
            table = done["tables"]["events"]
            print_table(f"erasure of one subject ({options.rows:,} rows, {options.users:,} users, "
                        f"{options.loads} loads; history made and loaded in {made:.0f}s)", [
                ("rows erased", f"{table['rows']:,} (not loaded yet: {table['not_loaded']})"),
                ("data files holding them", f"{table['files']} (+ {table['inlined_rows']} inlined rows)"),
                ("dry run: wall / CPU s / peak RSS",
                 f"{dry_wall:.1f} / {dry_cpu:.1f} / {dry_rss / 2**20:.0f} MiB"),
                ("erase: wall / CPU s / peak RSS", f"{wall:.1f} / {cpu:.1f} / {rss / 2**20:.0f} MiB"),
                ("erase: seconds in the process", f"{done['seconds']:.1f}"),
                ("files rewritten", str(done["files_rewritten"])),
                ("bytes written", f"{done['bytes_written']:,}"),
                ("snapshots expired / kept", f"{len(done['snapshots_expired'])} / {done['snapshots_kept']}"),
                ("staged batches removed", str(done["staged_batches_removed"])),
            ])
            assert dry["rows"] == done["rows"], (dry, done)
        finally:
            drop_databases(names)


if __name__ == "__main__":
    main()
