"""What one short ``--run`` costs with and without the driver JVM's class archive.

Each rep adds a few thousand events and runs ``events_pipeline.py --run --json`` in its own
process, alternating ``SPARK_CLASS_ARCHIVE=off`` and an archive recorded beforehand in a scratch
folder (the recording run is reported apart: its exit waits for the JVM to write the archive).

    uv run --dev python bench/bench_start.py --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, drop_databases, measured, print_table, scratch_env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--events", type=int, default=3000, help="new events per run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-start-") as tmp:
        env, dbs = scratch_env(Path(tmp))
        archive = {**env, "SPARK_CLASS_ARCHIVE": str(Path(tmp) / "jvm")}
        try:
            def one_run(run_env: dict[str, str], seed: int) -> tuple[float, float, int]:
                subprocess.run([sys.executable, str(ROOT / "insert_event_data_loop.py"), "--rows",
                                str(args.events), "--seed", str(seed), "--quiet"],
                               env={**os.environ, **env}, check=True, stdout=subprocess.DEVNULL)
                result, wall, cpu, rss = measured([sys.executable, "events_pipeline.py", "--run", "--json"],
                                                  run_env)
                assert json.loads(result.stdout)["rows_inserted"] == args.events
                return wall, cpu, rss

            recording = one_run(archive, 1)
            runs: dict[str, list[tuple[float, float, int]]] = {"off": [], "archive": []}
            for rep in range(args.reps):
                runs["off"].append(one_run({**env, "SPARK_CLASS_ARCHIVE": "off"}, 10 + 2 * rep))
                runs["archive"].append(one_run(archive, 11 + 2 * rep))
        finally:
            drop_databases(dbs)

    def median(kind: str, i: int) -> float:
        return statistics.median(r[i] for r in runs[kind])

    print_table(f"one --run of {args.events} new events (spark, local), median of {args.reps}", [
        ("wall s, no archive", f"{median('off', 0):.1f}"),
        ("wall s, archive mapped", f"{median('archive', 0):.1f}"),
        ("CPU s of the process tree, no archive", f"{median('off', 1):.1f}"),
        ("CPU s of the process tree, archive mapped", f"{median('archive', 1):.1f}"),
        ("peak RSS MiB, no archive", f"{median('off', 2) / 2**20:.0f}"),
        ("peak RSS MiB, archive mapped", f"{median('archive', 2) / 2**20:.0f}"),
        ("wall s of the recording run (once)", f"{recording[0]:.1f}"),
    ])


if __name__ == "__main__":
    main()
