-- After flow_take.sql, in the same transaction (so a statement of its
-- own, whose snapshot sees what the last holder of the lock committed):
-- how many jobs of each of the functions $1 are under a lease that has
-- not run out, whichever server holds it; a child held for its parents
-- (owner '(held)', deps_add) is not running. Leased rows are few (jobs_owner).
SELECT func, count(*) FROM dsjob.jobs
WHERE state = 0 AND owner IS NOT NULL AND owner <> '(held)' AND lease_until >= now()
 AND func = ANY($1::text[])
GROUP BY func
