-- Failing checks per table in every quality run, oldest first: the trend of each table's health.
-- {results} is the pipeline's results table (`<quality_schema>.expectation_results`).
SELECT
  run_id,
  max(run_at) AS run_at,
  layer,
  table_name,
  count(*) AS checks,
  count_if(NOT success) AS failing,
  count_if(NOT success AND severity = 'error') AS failing_errors
FROM {results}
GROUP BY run_id, layer, table_name
ORDER BY run_at, layer, table_name
