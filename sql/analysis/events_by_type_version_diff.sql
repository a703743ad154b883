-- Event counts by type at snapshot $version, now, and the difference: what the loads after
-- that snapshot added.
-- Parameters: version (a snapshot id from --snapshots).
-- Example: uv run events_pipeline.py --sql-file sql/analysis/events_by_type_version_diff.sql --param version=2
WITH then_ AS (
    SELECT event_type, count(*) AS events FROM main.events AT (VERSION => $version) GROUP BY ALL
), now_ AS (
    SELECT event_type, count(*) AS events FROM main.events GROUP BY ALL
)
SELECT coalesce(n.event_type, t.event_type) AS event_type,
       coalesce(t.events, 0) AS at_version,
       coalesce(n.events, 0) AS now,
       coalesce(n.events, 0) - coalesce(t.events, 0) AS difference
FROM now_ n FULL OUTER JOIN then_ t USING (event_type)
ORDER BY event_type;
