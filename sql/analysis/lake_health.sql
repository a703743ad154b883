-- Lake health per table: live rows, data files and their sizes, delete files (small average
-- files mean compaction is due; the maintenance job merges them).
-- Parameters: none.
-- Example: uv run events_pipeline.py --sql-file sql/analysis/lake_health.sql
WITH live AS (
    SELECT 'main' AS schema_name, 'events' AS table_name, count(*) AS live_rows FROM main.events
    UNION ALL SELECT 'ops', 'batches', count(*) FROM ops.batches
    UNION ALL SELECT 'ops', 'quarantine', count(*) FROM ops.quarantine
)
SELECT l.schema_name, l.table_name, l.live_rows,
       coalesce(i.file_count, 0) AS data_files,
       coalesce(i.file_size_bytes, 0) AS data_bytes,
       round(coalesce(i.file_size_bytes, 0) / greatest(coalesce(i.file_count, 0), 1) / 1024.0, 1) AS avg_file_kib,
       i.delete_file_count AS delete_files
FROM live l
JOIN ducklake_table_info(current_database()) i ON i.table_name = l.table_name
ORDER BY l.schema_name, l.table_name;
