-- Pass rate of every quality run, newest first: the first chart of a quality dashboard.
-- {results} is the pipeline's results table (`<quality_schema>.expectation_results`).
SELECT
  run_id,
  max(run_at) AS run_at,
  count(*) AS checks,
  count_if(success) AS passed,
  count_if(NOT success AND severity = 'error') AS errors,
  count_if(NOT success AND severity = 'warning') AS warnings,
  round(100.0 * count_if(success) / count(*), 1) AS pass_rate_pct
FROM {results}
GROUP BY run_id
ORDER BY run_at DESC
