"""Two schedulers compacting a new lake beside a writer, in a loop: does any process abort?

Each attempt makes a new lake on scratch databases of BENCH_PG_DSN, starts the generator writing
(200 rows every 0.5 s) and two schedulers as a user runs them (``--schedule --run-now``, loads every
second, expiry and compaction every two seconds: each compacts right after its first load, beside
the other's loads), stops them after ``--seconds`` with SIGTERM and prints one line per attempt:
each scheduler's exit code, its failed jobs (and the first line of each error), and whether the
lake equals the source after one catching-up ``--run``. In the field, one scheduler of such a pair
aborted (exit 134: a DuckDB INTERNAL error invalidated its instance, and closing a session of it
with an open transaction threw from a destructor; docs/troubleshooting.md#duckdb-fatal-errors).

    uv run --dev python bench/bench_two_schedulers.py                  # 20 attempts of 30 s
    uv run --dev python bench/bench_two_schedulers.py --attempts 5 --seconds 15
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import drop_databases, scratch_env
from pipeline.load.verify import compare
from pipeline.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
SCHEDULE = ("--schedule", "--run-now", "--engine", "dlt", "--load-every", "1s", "--expire-every", "2s",
            "--compact-every", "2s", "--metrics-port", "0")


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["uv", "run", *args], cwd=ROOT, env={**os.environ, **env},
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM to the process group; its exit code (SIGKILL after 60 s: reported as such)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return -9


def attempt(number: int, seconds: float) -> list[object]:
    with tempfile.TemporaryDirectory(prefix="bench-two-schedulers-") as work:
        folder = Path(work)
        env, names = scratch_env(folder)
        env |= {"LOOKBACK": "15m", "PYTHONFAULTHANDLER": "1"}
        try:
            subprocess.run(["uv", "run", "insert_event_data_loop.py", "--rows", "500", "--loops", "1",
                            "--quiet", "--seed", str(number)], cwd=ROOT, env={**os.environ, **env},
                           check=True, capture_output=True)
            writer = _start(["insert_event_data_loop.py", "--continuous", "--rows", "200", "--delay", "0.5",
                             "--quiet"], env, folder / "writer.log")
            logs = [folder / f"scheduler{k}.log" for k in (1, 2)]
            schedulers = [_start(["events_pipeline.py", *SCHEDULE], env, log) for log in logs]
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and all(p.poll() is None for p in schedulers):
                time.sleep(0.5)
            codes = [_stop(p) for p in schedulers]
            _stop(writer)
            caught_up = subprocess.run(["uv", "run", "events_pipeline.py", "--run", "--engine", "dlt"],
                                       cwd=ROOT, env={**os.environ, **env}, capture_output=True)
            equal = caught_up.returncode == 0 and compare(load_settings(env)).equal
            failed = []
            for k, log in enumerate(logs, 1):
                text = log.read_text(errors="replace")
                failed += [f"s{k} {m.group(1)}: {m.group(2)[:80]}"
                           for m in re.finditer(r"job (\w+) failed[^:]*: (.*)", text)]
                if "terminate called" in text:
                    failed.append(f"s{k} ABORTED: " + text[text.index("terminate called"):][:120])
            return [number, codes[0], codes[1], len(failed), "; ".join(failed[:3]) or "-", equal]
        finally:
            drop_databases(names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30)
    options = parser.parse_args()
    rows = []
    for number in range(1, options.attempts + 1):
        rows.append(attempt(number, options.seconds))
        print(f"attempt {number}: exit codes {rows[-1][1]}, {rows[-1][2]}", file=sys.stderr, flush=True)
    header = ["attempt", "exit 1", "exit 2", "failed jobs", "lake == source", "first failures"]
    print("\n" + " | ".join(header) + "\n" + "-" * 100)
    for number, one, two, failed, first, equal in rows:
        print(f"{number:>7} | {one:>6} | {two:>6} | {failed:>11} | {equal!s:>14} | {first}")
    aborted = sum(1 for row in rows if row[1] not in (0,) or row[2] not in (0,))
    print(f"\n{aborted} of {len(rows)} attempts had a scheduler exit non-zero")


if __name__ == "__main__":
    main()
