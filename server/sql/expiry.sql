-- Milliseconds until the first lease of another server than $1 runs out
-- (0: already out), or -1 for none. Leased rows are few (jobs_owner).
SELECT coalesce(greatest(ceil(extract(epoch FROM min(lease_until) - now()) * 1000), 0)::bigint, -1)
FROM dsjob.jobs WHERE state = 0 AND owner IS NOT NULL AND owner <> $1::text
