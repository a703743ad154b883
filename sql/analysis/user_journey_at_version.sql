-- One user's journey (every event carrying their user_id) as the lake was at snapshot $version.
-- Parameters: user_id (e.g. user_123456), version (a snapshot id from --snapshots).
-- Example: uv run events_pipeline.py --sql-file sql/analysis/user_journey_at_version.sql \
--            --param user_id=user_123456 --param version=3
SELECT event_timestamp, event_type,
       details ->> 'login_method' AS login_method,
       details ->> 'endpoint' AS endpoint,
       details ->> 'feature_name' AS feature,
       details ->> 'action' AS action
FROM main.events AT (VERSION => $version)
WHERE (details ->> 'user_id') = $user_id
ORDER BY event_timestamp;
