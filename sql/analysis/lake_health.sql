-- Lake health per table: live rows, data files and their sizes, rows still inlined in the
-- catalog (flushed to Parquet by compaction), delete files.
-- Parameters: none.
-- Example: uv run events_pipeline.py --sql-file sql/analysis/lake_health.sql
WITH files AS (
    SELECT * FROM query('SELECT table_id, count(*) AS files, sum(record_count) AS file_rows, '
                        || 'sum(file_size_bytes) AS bytes FROM ' || getvariable('lake_metadata')
                        || '.ducklake_data_file WHERE end_snapshot IS NULL GROUP BY table_id')
), live AS (
    SELECT 'main' AS schema_name, 'events' AS table_name, count(*) AS live_rows FROM main.events
    UNION ALL SELECT 'ops', 'batches', count(*) FROM ops.batches
    UNION ALL SELECT 'ops', 'quarantine', count(*) FROM ops.quarantine
)
SELECT l.schema_name, l.table_name, l.live_rows,
       coalesce(f.files, 0) AS data_files,
       coalesce(f.bytes, 0) AS data_bytes,
       round(coalesce(f.bytes, 0) / greatest(coalesce(f.files, 0), 1) / 1024.0, 1) AS avg_file_kib,
       greatest(l.live_rows - coalesce(f.file_rows, 0), 0) AS inlined_rows,
       i.delete_file_count AS delete_files
FROM live l
JOIN ducklake_table_info(current_database()) i ON i.table_name = l.table_name
LEFT JOIN files f ON f.table_id = i.table_id
ORDER BY l.schema_name, l.table_name;
