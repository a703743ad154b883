"""Benchmark the questions people ask the lake: the seed's queries and four product questions, through
the project's SQL session (typed payload keys serving the JSON form) against DuckDB alone on the
same lake files parsing the JSON, in the same run; and how fast a ``--sql`` session starts.

    uv run --dev python bench/bench_queries.py --rows 10000000 [--reps 5]

The source is made with ``generate_series``: events over 30 days of five types with the generator's
payloads (user_login 10 %, api_request 40 %, payment_processed 10 %, error_occurred 5 %,
feature_usage 35 %; ``user_id`` one of 100,000 in logins, API requests and feature usage, so
TYPED_KEYS=auto types it), loaded by ``--run`` (zero-copy, the arrow reader) in two loads (the
history, then the last day), so time travel has a version to go back to.

Hot: the median of ``--reps`` runs in one open session after a first run (ours: the session
``--sql`` opens, each statement served as ``--sql`` serves it; DuckDB alone: a plain attach of the
same lake, each statement as written). Cold: a fresh process per query, wall seconds (ours:
``events_pipeline.py --sql``; DuckDB alone: ``python -c`` attaching and running it). Then the
start of a read-only session in a fresh process: ``--sql "SELECT 1"`` against a bare attach.
Uses BENCH_PG_DSN (default the local Postgres).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    EVENTS_TABLE_SQL,
    ROOT,
    drop_databases,
    fill_in_parallel,
    measured,
    print_table,
    scratch_env,
)

# one row per i: its type by i % 20, a user by a multiplicative hash of i (users spread over every day)
SLICE_SQL = """
INSERT INTO public.events (event_id, event_type, event_timestamp, details)
SELECT gen_random_uuid(), kind,
  now() - interval '5 minutes' - (({rows} - i) * (interval '30 days' / {rows})),
  CASE kind
    WHEN 'user_login' THEN jsonb_build_object('user_id', usr,
        'ip_address', '10.0.' || (i % 250) || '.' || (i % 97),
        'user_agent', 'Mozilla/5.0 (X11; Linux x86_64) rv:' || (100 + i % 30), 'session_id', md5(i::text),
        'login_method', (ARRAY['password','sso','magic_link'])[1 + i % 3], 'success', i % 25 <> 0)
    WHEN 'api_request' THEN jsonb_build_object('endpoint', (ARRAY['/api/v1/users/{{id}}','/api/v1/orders',
        '/api/v1/search','/api/v1/items/{{id}}','/api/v1/cart'])[1 + i % 5], 'method',
        (ARRAY['GET','GET','GET','POST','PUT'])[1 + (i / 5) % 5], 'status_code',
        (ARRAY[200,200,200,200,201,204,400,404,500,503])[1 + (i / 7) % 10],
        'response_time_ms', round((20 + (i * 7919 % 1000) / 7.0)::numeric, 1),
        'request_id', 'req_' || md5(i::text), 'user_id', usr)
    WHEN 'payment_processed' THEN jsonb_build_object('transaction_id', 'txn_' || md5(i::text),
        'amount', round(((i * 31 % 100000) / 100.0)::numeric, 2),
        'currency', (ARRAY['USD','EUR','JPY'])[1 + i % 3],
        'payment_method', 'card', 'status', (ARRAY['succeeded','succeeded','failed'])[1 + i % 3],
        'customer_id', 'cus_' || (i % 50000), 'merchant_id', 'm_' || (i % 300))
    WHEN 'error_occurred' THEN jsonb_build_object('error_code', 'E' || (1000 + i % 40), 'severity',
        (ARRAY['low','medium','high','critical'])[1 + i % 4],
        'service', (ARRAY['api','auth','billing'])[1 + i % 3],
        'message', 'something failed in step ' || (i % 50), 'stack_trace_hash', md5(i::text),
        'host', 'web-' || (i % 12))
    ELSE jsonb_build_object('feature_name', (ARRAY['search','export','share','dashboard'])[1 + i % 4],
        'action', (ARRAY['open','click','close'])[1 + i % 3], 'duration_ms', i * 13 % 60000, 'user_id', usr)
  END
FROM (SELECT i, 'user_' || ((i::bigint * 2654435761) % 100000) AS usr,
             CASE WHEN i % 20 < 2 THEN 'user_login' WHEN i % 20 < 10 THEN 'api_request'
                  WHEN i % 20 < 12 THEN 'payment_processed' WHEN i % 20 < 13 THEN 'error_occurred'
                  ELSE 'feature_usage' END AS kind
      FROM generate_series({first}::bigint, {last}::bigint) i) g
"""
USER = "user_12345"
# (name, SQL): {version} is the history's snapshot, {previous} the one before the last load
QUERIES = [
    (
        "seed: events by type, last hour",
        "SELECT event_type, count(*) FROM lake.events WHERE event_timestamp >= now() - INTERVAL 1 HOUR "
        "GROUP BY event_type ORDER BY 2 DESC",
    ),
    (
        "seed: a user's journey at a version",
        f"SELECT * FROM lake.events AT (VERSION => {{version}}) WHERE details->>'user_id' = '{USER}' "
        "ORDER BY event_timestamp",
    ),
    (
        "seed: counts at a version vs now",
        "SELECT event_type, count(*) FROM lake.events AT (VERSION => {version}) GROUP BY ALL ORDER BY 1",
    ),
    (
        "seed: critical errors between snapshots",
        "SELECT count(*) FROM lake.table_changes('events', {previous}, {latest}) WHERE event_type = "
        "'error_occurred' AND details->>'severity' = 'critical'",
    ),
    (
        "a user's journey (now)",
        f"SELECT * FROM lake.events WHERE details->>'user_id' = '{USER}' ORDER BY event_timestamp",
    ),
    (
        "p95 response time per endpoint per hour (last day)",
        "SELECT details->>'endpoint' AS endpoint, date_trunc('hour', event_timestamp) AS hour, "
        "quantile_cont(CAST(details->>'response_time_ms' AS DOUBLE), 0.95) FROM lake.events "
        "WHERE event_type = 'api_request' AND event_timestamp >= now() - INTERVAL 1 DAY "
        "GROUP BY ALL ORDER BY 1, 2",
    ),
    (
        "errors per type, last day",
        "SELECT details->>'error_code' AS code, count(*) FROM lake.events "
        "WHERE event_type = 'error_occurred' AND event_timestamp >= now() - INTERVAL 1 DAY "
        "GROUP BY ALL ORDER BY 2 DESC",
    ),
    (
        "sessions per user (logins, last week)",
        "SELECT details->>'user_id' AS user_id, count(DISTINCT details->>'session_id') FROM lake.events "
        "WHERE event_type = 'user_login' AND event_timestamp >= now() - INTERVAL 7 DAY GROUP BY ALL "
        "ORDER BY 2 DESC LIMIT 10",
    ),
]

ALONE = """
import sys, time, duckdb
con = duckdb.connect()
for statement in sys.argv[1].split(";"):
    con.execute(statement)
t0 = time.monotonic()
rows = con.execute(sys.argv[2]).fetchall()
print(len(rows), time.monotonic() - t0)
"""


def _attach_sql(env: dict[str, str]) -> str:
    """The statements that open the lake read-only in a bare DuckDB (as --print-attach prints them)."""
    from pipeline import embedded
    from pipeline.lake.attach_sql import open_statements
    from pipeline.settings import load_settings

    settings = embedded.resolved(load_settings(env))
    return ";".join(
        open_statements(
            settings.lake_name,
            settings.catalog,
            settings.data_path,
            storage=settings.storage,
            show_secrets=True,
            read_only=True,
        )
    )


def _as_duckdb_runs_it(sql: str) -> str:
    """``sql`` as DuckDB alone must be given it: an ``->>`` after AND, OR or NOT in parentheses (DuckDB
    1.5 groups the arrow with everything left of it; the session regroups it itself)."""
    import functools

    import duckdb

    from pipeline.sql_session.arrow_grouping import regrouped
    from pipeline.sql_session.query import parsed_tree

    with duckdb.connect() as con:
        parse = functools.partial(parsed_tree, con)
        found = regrouped(sql, parse(sql), parse)
    return found[0] if found else sql


def _cold(env: dict[str, str], attach: str, sql: str) -> tuple[float, float]:
    """Wall seconds of ``sql`` in a fresh process: ``--sql``, then a bare DuckDB attach."""
    times = []
    for command in (
        [sys.executable, str(ROOT / "events_pipeline.py"), "--sql", sql, "--json"],
        [sys.executable, "-c", ALONE, attach + ";USE lake", _as_duckdb_runs_it(sql)],
    ):
        t0 = time.monotonic()
        subprocess.run(command, env={**os.environ, **env}, cwd=ROOT, check=True, capture_output=True)
        times.append(time.monotonic() - t0)
    return times[0], times[1]


def _hot(run_one, sql: str, reps: int) -> tuple[float, int]:
    rows = run_one(sql)  # the first run warms the files and the catalog
    times = []
    for _ in range(reps):
        t0 = time.monotonic()
        run_one(sql)
        times.append(time.monotonic() - t0)
    return statistics.median(times), rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--cold",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time each query in a fresh process",
    )
    args = parser.parse_args()
    import duckdb
    import psycopg

    from pipeline import embedded
    from pipeline.settings import load_settings
    from pipeline.sql_session.query import open_session, run_session

    with tempfile.TemporaryDirectory(prefix="bench-queries-") as work:
        env, names = scratch_env(Path(work))
        try:
            t0 = time.monotonic()
            day = args.rows // 30
            with psycopg.connect(env["SOURCE_PG_DSN"], autocommit=True) as conn:
                conn.execute(EVENTS_TABLE_SQL)
            fill_in_parallel(
                env["SOURCE_PG_DSN"],
                lambda lo, hi: SLICE_SQL.format(rows=args.rows, first=lo, last=hi),
                1,
                args.rows - day,
            )
            with psycopg.connect(env["SOURCE_PG_DSN"], autocommit=True) as conn:
                conn.execute("VACUUM (ANALYZE) public.events")
            made = time.monotonic() - t0
            load, load_wall, _, _ = measured(
                [sys.executable, str(ROOT / "events_pipeline.py"), "--run", "--json"], env
            )
            assert load.returncode == 0, load.stderr[-2000:]
            with psycopg.connect(env["SOURCE_PG_DSN"], autocommit=True) as conn:
                conn.execute(SLICE_SQL.format(rows=args.rows, first=args.rows - day + 1, last=args.rows))
            second = subprocess.run(
                [sys.executable, str(ROOT / "events_pipeline.py"), "--run", "--json"],
                env={**os.environ, **env},
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            assert second.returncode == 0, second.stderr[-2000:]
            settings = embedded.resolved(load_settings(env))
            con = open_session(settings)
            [[latest]] = con.execute("SELECT max(snapshot_id) FROM lake.snapshots()").fetchall()
            [[typed]] = con.execute(
                "SELECT string_agg(payload_key, ', ') FROM lake.ops.typed_keys"
            ).fetchall()
            version = int(json.loads(load.stdout)["snapshots"][-1])
            names_sql = [
                (name, sql.format(version=version, previous=version, latest=latest)) for name, sql in QUERIES
            ]
            alone = duckdb.connect()
            attach = _attach_sql(env)
            for statement in attach.split(";"):
                alone.execute(statement)
            alone.execute("USE lake")

            def ours(sql: str) -> int:
                result = run_session(con, [sql], {}, None)
                assert result.error is None, result.error
                return result.commands[0].row_count or 0

            def plain(sql: str) -> int:
                return len(alone.execute(sql).fetchall())

            rows: list[tuple[str, str]] = [
                ("history made / first load wall s", f"{made:.0f} / {load_wall:.1f}"),
                ("typed keys (TYPED_KEYS=auto)", typed or "none"),
            ]
            for name, sql in names_sql:
                try:
                    mine, mine_rows = _hot(ours, sql, args.reps)
                    theirs, their_rows = _hot(plain, _as_duckdb_runs_it(sql), args.reps)
                except (AssertionError, duckdb.Error) as exc:  # said, and the others still measured
                    words = str(exc).replace("\n", " ")
                    rows.append((name, f"FAILED: {words[words.find('Error') :][:150]}"))
                    continue
                assert mine_rows == their_rows, (name, mine_rows, their_rows)
                cold = ""
                if args.cold:
                    cold = "; cold " + " vs ".join(f"{s:.2f}" for s in _cold(env, attach, sql))
                rows.append(
                    (
                        f"{name} ({mine_rows} rows)",
                        f"hot {mine:.3f} vs {theirs:.3f} s = {mine / theirs:.2f}x{cold}",
                    )
                )
            con.close()
            alone.close()
            starts = []
            for command in (
                [sys.executable, str(ROOT / "events_pipeline.py"), "--sql", "SELECT 1"],
                [sys.executable, "-c", ALONE, attach + ";USE lake", "SELECT 1"],
            ):
                walls = []
                for _ in range(args.reps):
                    t0 = time.monotonic()
                    subprocess.run(
                        command, env={**os.environ, **env}, cwd=ROOT, check=True, capture_output=True
                    )
                    walls.append(time.monotonic() - t0)
                starts.append(statistics.median(walls))
            rows.append(
                (
                    "read-only session start, fresh process (median wall s)",
                    f"--sql 'SELECT 1' {starts[0]:.2f} vs bare attach {starts[1]:.2f} = "
                    f"{starts[0] / starts[1]:.2f}x",
                )
            )
            print_table(
                f"Queries on {args.rows:,} events: ours (typed keys served) vs DuckDB alone "
                f"(JSON parsed), median of {args.reps}",
                rows,
            )
        finally:
            drop_databases(names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
