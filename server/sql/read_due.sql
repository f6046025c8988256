-- Milliseconds until the first job that waits for its run-at time is due,
-- of the functions $1 (text[]; $2, how many of each, is not read): one
-- index probe per function and priority. Such a job is an epoch job, or
-- the retry backoff of a server whose lease ran out.
SELECT ceil(extract(epoch FROM min(d.run_at) - now()) * 1000)::int8
FROM unnest($1::text[], $2::int4[]) AS f(name, n)
CROSS JOIN (VALUES (0::int2), (1::int2), (2::int2)) AS p(prio),
LATERAL (SELECT run_at FROM dsjob.jobs WHERE state = 0 AND func = f.name
 AND prio = p.prio AND run_at > now() AND (owner IS NULL OR lease_until < now())
 ORDER BY run_at LIMIT 1) d
