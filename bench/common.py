"""Shared bench helpers: scratch databases, a peak-memory sampler, table printing."""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from pathlib import Path

import psutil
import psycopg

from pipeline.config import Settings, load_settings
from pipeline.pgdsn import PgDsn

BENCH_PG_DSN = os.environ.get("BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


def scratch_settings(work: Path, tag: str | None = None) -> tuple[Settings, list[str]]:
    """Settings on fresh source and catalog databases of BENCH_PG_DSN."""
    server = PgDsn.parse(BENCH_PG_DSN, "BENCH_PG_DSN")
    tag = tag or secrets.token_hex(3)
    names = [f"el_bench_src_{tag}", f"el_bench_cat_{tag}"]
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    env = {"SOURCE_PG_DSN": server.with_dbname(names[0]).conninfo(),
           "DUCKLAKE_CATALOG": server.with_dbname(names[1]).conninfo(),
           "DUCKLAKE_DATA_PATH": str(work / "data") + "/", "STAGING_PATH": str(work / "staging"),
           "EVENT_LAKE_HOME": str(work / "home")}
    return load_settings(env), names


def drop_databases(names: list[str]) -> None:
    server = PgDsn.parse(BENCH_PG_DSN, "BENCH_PG_DSN")
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class PeakMemory:
    """Samples the RSS of this process and its children (the Spark JVM) every 0.2 s."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = me.memory_info().rss
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):  # a child may exit while we look
                    total += child.memory_info().rss
            self.peak = max(self.peak, total)
            time.sleep(0.2)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def print_table(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    print(f"\n{title}\n" + "-" * (width + 20))
    for key, value in rows:
        print(f"{key:<{width}}  {value:>16}")
