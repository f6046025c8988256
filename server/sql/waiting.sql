-- The functions with jobs ready under no server's lease, and how many of each.
SELECT func, count(*) FROM dsjob.jobs WHERE state = 0 AND run_at <= now()
 AND (owner IS NULL OR lease_until < now())
GROUP BY func ORDER BY func
