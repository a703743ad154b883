-- Payment volume and failure rate by day and currency.
-- Parameters: none.
-- Example: uv run events_pipeline.py --sql-file sql/analysis/payments_by_day.sql
SELECT CAST(event_timestamp AS DATE) AS day,
       details ->> 'currency' AS currency,
       count(*) AS payments,
       round(sum(CAST(details ->> 'amount' AS DECIMAL(18, 2))), 2) AS volume,
       round(avg(CASE WHEN (details ->> 'status') = 'failed' THEN 1.0 ELSE 0.0 END), 4) AS failure_rate
FROM main.events
WHERE event_type = 'payment_processed'
GROUP BY ALL
ORDER BY day, volume DESC;
