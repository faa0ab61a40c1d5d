-- Rows through each stage per minute, and how long its batches took: is the service keeping up?
-- {metrics} is the pipeline's stream metrics table (`<quality_schema>.stream_metrics`).
SELECT
  stage,
  date_trunc('MINUTE', at) AS minute,
  count(*) AS batches,
  sum(input_rows) AS rows_in,
  sum(rows_out) AS rows_out,
  sum(quarantined) AS quarantined,
  round(avg(batch_ms) / 1000, 2) AS avg_batch_s
FROM {metrics}
GROUP BY stage, date_trunc('MINUTE', at)
ORDER BY minute, stage
