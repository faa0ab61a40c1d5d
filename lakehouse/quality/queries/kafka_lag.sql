-- Records each bronze stream had left to read after each batch (0 once it has caught up).
-- {metrics} is the pipeline's stream metrics table (`<quality_schema>.stream_metrics`).
SELECT
  stream,
  at,
  aggregate(map_values(kafka_lag), CAST(0 AS BIGINT), (total, n) -> total + n) AS records_behind
FROM {metrics}
WHERE kafka_lag IS NOT NULL
ORDER BY at, stream
