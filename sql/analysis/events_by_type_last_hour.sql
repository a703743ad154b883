-- Event counts by type in the last hour (relative to the newest event in the lake, so it
-- also answers for a lake read at an old snapshot with --at-version / --at-time).
-- Parameters: none.
-- Example: uv run events_pipeline.py --sql-file sql/analysis/events_by_type_last_hour.sql
SELECT event_type, count(*) AS events
FROM main.events
WHERE event_timestamp > (SELECT max(event_timestamp) FROM main.events) - INTERVAL 1 HOUR
GROUP BY event_type
ORDER BY events DESC, event_type;
