-- Records kept out of the lake, by source and reason, most first: what to fix upstream.
-- {quarantine} is the pipeline's quarantine table (`<bronze_schema>._quarantine`).
SELECT
  coalesce(source, '(no source)') AS source,
  reason,
  count(*) AS records,
  min(quarantined_at) AS first_at,
  max(quarantined_at) AS last_at
FROM {quarantine}
GROUP BY coalesce(source, '(no source)'), reason
ORDER BY records DESC, source, reason
LIMIT 50
