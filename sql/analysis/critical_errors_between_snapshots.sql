-- Critical errors inserted between two snapshots, from DuckLake's change feed.
-- Parameters: from_snapshot, to_snapshot (snapshot ids; the range is inclusive).
-- Example: uv run events_pipeline.py --sql-file sql/analysis/critical_errors_between_snapshots.sql \
--            --param from_snapshot=2 --param to_snapshot=5
SELECT snapshot_id, event_timestamp,
       details ->> 'service' AS service,
       details ->> 'error_code' AS error_code,
       details ->> 'message' AS message
FROM ducklake_table_changes(current_database(), 'main', 'events', $from_snapshot, $to_snapshot)
WHERE change_type = 'insert'
  AND event_type = 'error_occurred'
  AND (details ->> 'severity') = 'critical'
ORDER BY snapshot_id, event_timestamp;
