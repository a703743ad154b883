-- Snapshot audit: who changed the lake, what, and when (from commit messages and metadata).
-- Parameters: none.
-- Example: uv run events_pipeline.py --sql-file sql/analysis/snapshot_audit.sql
SELECT snapshot_id, snapshot_time, author, commit_message,
       -- a load's commit names its group of batches (one per table) and each table's rows staged
       json_extract_string(commit_extra_info, '$.group') AS batch_group,
       list_sum(json_extract(commit_extra_info, '$.rows_staged.*')::BIGINT[]) AS rows_staged,
       changes
FROM snapshots()
ORDER BY snapshot_id;
