"""One load of the same events through each way of running Spark: local[*], a standalone
cluster (one worker) and a warm Spark Connect server, each started from the pyspark package.

    uv run --dev python bench/bench_engines.py --events 1000000

Each mode loads into its own fresh lake (same source, same catalog database, its own
DUCKLAKE_NAME, data and staging) through the real CLI (`--run --json`), so the wall time
includes what a user waits for; the per-stage seconds come from the run's own report.
The Connect server is warmed by one throwaway load first (its JVM lives on between runs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import drop_databases, print_table, scratch_settings
from pipeline import embedded
from pipeline.load.verify import compare
from pipeline.settings import load_settings
from tests.spark_services import ConnectServer, StandaloneCluster

ROOT = Path(__file__).resolve().parent.parent


def load(env: dict[str, str]) -> tuple[float, dict[str, float]]:
    """``--run --json`` in a fresh process: wall seconds and the run's per-stage seconds."""
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, str(ROOT / "events_pipeline.py"), "--run", "--json"],
                          env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"load failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    lines = done.stdout.splitlines()
    start, end = lines.index("{"), len(lines) - 1 - lines[::-1].index("}")
    return wall, json.loads("\n".join(lines[start:end + 1]))["seconds"]


def lake_env(base: dict[str, str], work: Path, name: str) -> dict[str, str]:
    """A fresh lake of its own in the shared catalog database."""
    return {**base, "DUCKLAKE_NAME": name, "DUCKLAKE_DATA_PATH": str(work / name) + "/",
            "STAGING_PATH": str(work / f"staging_{name}")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--modes", nargs="+", default=["local", "cluster", "connect"],
                        choices=["local", "cluster", "connect"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="el-bench-engines-") as tmp:
        work = Path(tmp)
        settings, dbs = scratch_settings(work)
        base = {**{k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "DUCKLAKE_NAME"))},
                "SOURCE_PG_DSN": settings.source_dsn.conninfo(),
                "DUCKLAKE_CATALOG": settings.catalog.pg.conninfo(),
                "EVENT_LAKE_HOME": str(settings.home), "SPARK_LOCAL_IP": "127.0.0.1"}
        rows = []
        try:
            subprocess.run([sys.executable, str(ROOT / "insert_event_data_loop.py"), "--rows",
                            str(args.events), "--seed", "1", "--quiet"],
                           env=base, cwd=ROOT, check=True, capture_output=True)
            for mode in args.modes:
                server: StandaloneCluster | ConnectServer | None = None
                env = lake_env(base, work, f"lake_{mode}")
                if mode == "cluster":
                    server = StandaloneCluster(work / "cluster", cores=os.cpu_count() or 2).start()
                    env["SPARK_MASTER"] = server.url
                elif mode == "connect":
                    server = ConnectServer(work / "connect", cores=os.cpu_count() or 2).start()
                    load({**lake_env(base, work, "lake_warmup"), "SPARK_REMOTE": server.url})
                    env["SPARK_REMOTE"] = server.url
                try:
                    wall, seconds = load(env)
                finally:
                    if server is not None:
                        server.stop()
                equal = compare(embedded.resolved(load_settings(env))).equal
                total = seconds["total"]
                rows.append((mode, wall, seconds, total, equal))
        finally:
            drop_databases(dbs)
    for mode, wall, seconds, total, equal in rows:
        work_seconds = max(total - seconds.get("engine_start", 0), 1e-9)
        print_table(f"{args.events:,} events, Spark {mode}", [
            ("wall s (process start to exit)", f"{wall:.2f}"),
            ("Spark start s", f"{seconds.get('engine_start', 0):.2f}"),
            ("plan s", f"{seconds.get('plan', 0):.2f}"),
            ("extract s", f"{seconds.get('extract', 0):.2f}"),
            ("promote s", f"{seconds.get('promote', 0):.2f}"),
            ("run total s (incl. Spark start)", f"{total:.2f}"),
            ("events/s excl. Spark start", f"{args.events / work_seconds:,.0f}"),
            ("lake == source", "yes" if equal else "NO"),
        ])
    return 0


if __name__ == "__main__":
    sys.exit(main())
