-- admin "show job" of a child held in the table for its parents (owner
-- '(held)', deps_add.sql), which no server holds (store_postgres.c's
-- dep_show): by handle $1, or, when $1 is NULL, by function $2 and unique
-- key $3 ("show job unique F U"). Its handle, function, priority,
-- attempts, unique key in hex, run-at time, payload size, the parents it
-- still waits for and its after-fail policy.
SELECT j.handle, j.func, CASE j.prio WHEN 0 THEN 'high' WHEN 2 THEN 'low' ELSE 'normal' END,
 j.attempts, encode(coalesce(j.uniq, ''), 'hex'),
 extract(epoch FROM j.run_at)::bigint, length(j.data),
 coalesce((SELECT string_agg(d.parent, ',' ORDER BY d.parent) FROM dsjob.deps d
  WHERE d.child = j.handle AND d.state = 0), ''),
 coalesce((SELECT (ARRAY['fail', 'cancel', 'run'])[min(d.policy) + 1] FROM dsjob.deps d
  WHERE d.child = j.handle), 'fail')
FROM dsjob.jobs j
WHERE (j.handle = $1::text OR ($1::text IS NULL AND j.func = $2::text AND j.uniq = $3::bytea))
 AND j.state = 0 AND j.owner = '(held)'
LIMIT 1
