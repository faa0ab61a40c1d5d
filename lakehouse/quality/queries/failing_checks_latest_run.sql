-- The checks the latest quality run failed, by layer and table: what an operator opens first.
-- {results} is the pipeline's results table (`<quality_schema>.expectation_results`).
WITH latest AS (
  SELECT run_id FROM {results} ORDER BY run_at DESC LIMIT 1
)
SELECT r.layer, r.table_name, r.check_name, r.description, r.expectation, r.severity, r.observed_value, r.unexpected_count, r.unexpected_percent
FROM {results} r
JOIN latest USING (run_id)
WHERE NOT r.success
ORDER BY CASE r.severity WHEN 'error' THEN 0 ELSE 1 END, r.layer, r.table_name, r.expectation
