"""The lake's history as time series, for the dashboard and the metrics: rows and lag per
batch, snapshots and live data files over time, and job runs. Read from ``ops.batches``,
the job history, ``snapshots()`` and DuckLake's own file table, never from the source."""

from __future__ import annotations

import json
from collections.abc import Sequence

import duckdb

from pipeline.lake import jobs
from pipeline.lake.rows import Rows, fetch_dicts
from pipeline.lake.session import Lake
from pipeline.sqltext import one_row, quote_ident, quote_literal

POINTS = 200  # per series: enough to see a trend, small enough for one page and one scrape


def batches(lake: Lake, tables: Sequence[str], limit: int = POINTS) -> Rows:
    """The last ``limit`` promoted batches of ``tables`` (the pipeline's: SOURCE_TABLES' or the one),
    oldest first (every column of ``ops.batches``: a lake made before ``freshness_p95`` lacks it
    until its next load); ``lag_seconds``: how old the newest event of a batch was when it became
    queryable (the lake's freshness at that moment)."""
    return fetch_dicts(lake.con, f"""
        SELECT * FROM (
            SELECT *, epoch(promoted_at) - epoch(max_event_timestamp) AS lag_seconds
            FROM {lake.batches_table} WHERE list_contains(?, table_name)
            ORDER BY promoted_at DESC LIMIT ?)
        ORDER BY promoted_at""", [list(tables), limit])


def snapshots(lake: Lake, limit: int = POINTS) -> Rows:
    """The last ``limit`` snapshots, oldest first, with the number of snapshots kept up to each
    (expiry removes old ones) and the data files live in each (compaction lowers it)."""
    return fetch_dicts(lake.con, f"""
        WITH kept AS (SELECT snapshot_id, snapshot_time,
                             row_number() OVER (ORDER BY snapshot_id) AS snapshots_kept
                      FROM {lake.name}.snapshots()),
             recent AS (SELECT * FROM kept ORDER BY snapshot_id DESC LIMIT ?),
             files AS (FROM query('SELECT begin_snapshot, end_snapshot FROM '
                                  || getvariable('lake_metadata') || '.ducklake_data_file'))
        SELECT r.snapshot_id, r.snapshot_time, r.snapshots_kept,
               (SELECT count(*) FROM files f WHERE f.begin_snapshot <= r.snapshot_id
                  AND (f.end_snapshot IS NULL OR f.end_snapshot > r.snapshot_id)) AS data_files
        FROM recent r ORDER BY r.snapshot_id""", [limit])


def expiries(lake: Lake) -> Rows:
    """When snapshots were expired, and which (from the job history: expire and maintain jobs);
    expired snapshots are gone from the catalog, so this is how a chart can show them dropping."""
    table = jobs.source(lake)
    if table is None:
        return []
    rows = fetch_dicts(lake.con, f"""
        SELECT finished_at, CAST(details AS VARCHAR) AS details FROM {table}
        WHERE job IN ('expire', 'maintain') AND status = 'success'
          AND CAST(details AS VARCHAR) LIKE '%snapshots_expired%' ORDER BY finished_at""")
    found = []
    for row in rows:
        expired = json.loads(row["details"] or "{}").get("snapshots_expired") or []
        if expired and not json.loads(row["details"]).get("dry_run"):
            found.append({"finished_at": row["finished_at"], "snapshot_ids": [int(i) for i in expired]})
    return found


def job_runs(lake: Lake, limit: int = 50) -> Rows:
    """The last ``limit`` job runs, newest first."""
    return fetch_dicts(lake.con, f"""
        SELECT job, status, started_at, finished_at, {_SECONDS} AS seconds, {_LOADS} AS loads, error, host
        FROM {jobs.source(lake)} ORDER BY finished_at DESC LIMIT ?""", [limit])


# a follower's record stands for many loads (details.loads, details.loads_succeeded) and says how
# long one load took (details.seconds); any other record is one run, as long as its span
_LOADS = "coalesce(TRY_CAST(json_extract_string(details, '$.loads') AS BIGINT), 1)"
_SUCCEEDED = ("coalesce(TRY_CAST(json_extract_string(details, '$.loads_succeeded') AS BIGINT), "
              "CASE WHEN status = 'success' THEN 1 ELSE 0 END)")
_SECONDS = ("coalesce(TRY_CAST(json_extract_string(details, '$.seconds') AS DOUBLE), "
            "epoch(finished_at) - epoch(started_at))")


def job_totals(lake: Lake) -> Rows:
    """Per job: runs by status, the last success, and the last run's duration."""
    return fetch_dicts(lake.con, f"""
        SELECT job,
               sum({_SUCCEEDED}) AS succeeded,
               count(*) FILTER (status = 'failed') AS failed,
               count(*) FILTER (status NOT IN ('success', 'failed')) AS other,
               max(finished_at) FILTER (status = 'success') AS last_success,
               arg_max({_SECONDS}, finished_at) AS last_seconds
        FROM {jobs.source(lake)} GROUP BY job ORDER BY job""")


def rows_loaded(lake: Lake, tables: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Per table of ``tables``: rows inserted by every batch ever promoted, and the number of batches."""
    found = {table: (int(rows), int(count)) for table, rows, count in lake.execute(
        f"SELECT table_name, coalesce(sum(rows_inserted), 0), count(*) FROM {lake.batches_table} "
        "WHERE list_contains(?, table_name) GROUP BY table_name", [list(tables)]).fetchall()}
    return {table: found.get(table, (0, 0)) for table in tables}


# how ``--snapshots`` names the kinds of change DuckLake records per snapshot (others: the key's words)
CHANGE_WORDS = {
    "schemas_created": "create schema", "schemas_dropped": "drop schema", "tables_created": "create",
    "tables_dropped": "drop", "tables_altered": "alter", "tables_inserted_into": "insert",
    "tables_deleted_from": "delete", "inlined_insert": "insert (inlined)",
    "inlined_delete": "delete (inlined)", "tables_compacted": "compact", "compacted_table": "compact",
    "views_created": "create view", "views_dropped": "drop view",
}


CHANGES_WIDTH = 60  # characters of a snapshot's changes shown in the human listing (all: --format)
MESSAGE_WIDTH = 100  # a group's commit names every table's rows and window: the whole is in --json


def table_names(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """DuckLake's table ids, as ``snapshots()`` lists them in ``changes``, to ``schema.table``
    (a renamed or dropped table by its last name), from DuckLake's own metadata."""
    metadata = one_row(con.execute("SELECT getvariable('lake_metadata')"))[0]
    rows = con.execute(f"""FROM query('SELECT t.table_id, s.schema_name, t.table_name
        FROM {metadata}.ducklake_table t JOIN {metadata}.ducklake_schema s USING (schema_id)
        ORDER BY t.begin_snapshot, s.begin_snapshot')""").fetchall()
    return {str(table_id): f"{schema}.{table}" for table_id, schema, table in rows}


def snapshot_listing(lake: str, names: dict[str, str], *, human: bool) -> str:
    """The query ``--snapshots`` runs: table ids in ``changes`` replaced by ``names``. For people
    one short line per snapshot (second-precision UTC time, the changes in words, author and
    message); for programs every column DuckLake keeps."""
    pairs = ", ".join(f"{quote_literal(k)}: {quote_literal(v)}" for k, v in names.items())
    named = f"coalesce((MAP {{{pairs}}}::MAP(VARCHAR, VARCHAR))[v], v)"
    # created tables and schemas are listed by name already; the other changes by id
    values = f"CASE WHEN e.key LIKE '%created' THEN e.value ELSE list_transform(e.value, v -> {named}) END"
    source = f"{quote_ident(lake)}.snapshots()"
    if not human:
        return f"""SELECT snapshot_id, snapshot_time, schema_version,
            map_from_entries(list_transform(map_entries(changes), e -> {{'key': e.key, 'value': {values}}}))
              AS changes, author, commit_message, commit_extra_info
            FROM {source} ORDER BY snapshot_id"""
    words = " ".join(f"WHEN {quote_literal(k)} THEN {quote_literal(w)}" for k, w in CHANGE_WORDS.items())
    change = (f"(CASE e.key {words} ELSE replace(e.key, '_', ' ') END) || ' ' "
              f"|| array_to_string({values}, ', ')")
    # the changes column is capped (a table's creation lists every table), so no row pads all
    # the others; the message comes last, so each line is as long as its own message (capped too)
    return f"""WITH listed AS (
            SELECT *, array_to_string(list_transform(map_entries(changes), e -> {change}), '; ') AS said
            FROM {source})
        SELECT snapshot_id AS snapshot,
            strftime(snapshot_time AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M:%S') AS "time (UTC)", author,
            CASE WHEN length(said) > {CHANGES_WIDTH} THEN said[:{CHANGES_WIDTH - 1}] || '…' ELSE said END
              AS changes,
            CASE WHEN length(commit_message) > {MESSAGE_WIDTH}
              THEN commit_message[:{MESSAGE_WIDTH - 1}] || '…' ELSE commit_message END AS message
        FROM listed ORDER BY snapshot_id"""
