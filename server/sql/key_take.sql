-- The take of functions with keys across servers (store_postgres.c's
-- key_take): sequences and per-key concurrency limits, in the batch's
-- transaction after flow_take.sql locked each function's row of
-- dsjob.flow_bucket, so that the takes of such a function go one server
-- at a time, each seeing the leases the last one committed. A job's key is
-- its column k (schema_4_5.sql), its unique key's part before the
-- function's separator ('' if none), as flow_key_of makes it, written by
-- key_fill.sql just before. Per key, the jobs under a lease that has not
-- run out (or under this server's: renewed, not taken) count as running.
-- With a sequence (sq 1 hold, 2 skip) a key's first job in submission
-- order (id), live or (hold) dead after a failed attempt, is the only one
-- that may start, and only while none of its key runs (a job with a lower
-- id whose insert committed after a later one's take still waits). With a
-- per-key limit (kc, no sequence) a key starts at most kc less its running.
-- With a per-key rate (kr per kp ms, at most kcap held) a key starts at most
-- the whole tokens of its bucket in dsjob.flow_key_bucket (none there: a
-- full one), filled by PostgreSQL's clock; the buckets of the keys that
-- started jobs are written back, those full again are deleted. Keys are
-- served round robin: each key's first job, then each key's second, ...
-- What is read, through the indexes jobs_key and jobs_key_ready: each key
-- of the function once (ks, a skip scan: one index probe a key, however
-- many jobs it holds), with a sequence its head (hd: the first row by id
-- that may head it), without one its first n ready jobs (c0), and the
-- function's leased rows (bz, through jobs_owner): a cost per key and per
-- job taken, not per live row. A child held for its parents (owner
-- '(held)', deps_add) neither runs nor heads its key, so it cannot hold up
-- its own parent. A job that has never run and is not due yet (an epoch
-- job) heads no key either: a job takes its place in its sequence once it
-- may start (dsjobd(8)), as on one server; one waiting for its retry
-- (attempts > 0) keeps its place. $1 the functions, $2 how many jobs of
-- each to take, $3 their separators (key_fill.sql's), $4 sequence (0 off,
-- 1 hold, 2 skip), $5 the per-key concurrency (0 none), $6 the owner, $7
-- the lease in seconds, $8 the per-key rate (0 none), $9 its period in ms,
-- $10 its burst (0: the rate).
-- Rows as main.sql's taken rows, kind 3.
WITH RECURSIVE t AS (SELECT clock_timestamp() AS ts),
f AS (
 SELECT name, n, sq, kc, kr, kp, CASE WHEN kb > 0 THEN kb ELSE kr END AS kcap
 FROM unnest($1::text[], $2::int4[], $3::text[], $4::int4[], $5::int4[], $8::int4[], $9::int4[],
  $10::int4[]) AS u(name, n, sep, sq, kc, kr, kp, kb)),
ks(func, k) AS (
 SELECT f.name, (SELECT j.k FROM dsjob.jobs j WHERE j.func = f.name AND j.state <= 1
  AND j.k IS NOT NULL ORDER BY j.k LIMIT 1) FROM f
 UNION ALL
 SELECT ks.func, (SELECT j.k FROM dsjob.jobs j WHERE j.func = ks.func AND j.state <= 1
  AND j.k IS NOT NULL AND j.k > ks.k ORDER BY j.k LIMIT 1) FROM ks WHERE ks.k IS NOT NULL),
kk AS (
 SELECT ks.func, ks.k, f.n, f.sq, f.kc, f.kr, f.kcap FROM ks JOIN f ON f.name = ks.func
 WHERE ks.k IS NOT NULL),
bz AS (
 SELECT j.func, j.k, count(*) AS busy FROM dsjob.jobs j
 WHERE j.state = 0 AND j.owner IS NOT NULL AND j.owner <> '(held)'
  AND (j.lease_until >= now() OR j.owner = $6::text) AND j.func = ANY($1::text[])
 GROUP BY j.func, j.k),
kb AS (
 SELECT b.func, b.k, least(f.kcap::float8, b.tokens + greatest(extract(epoch FROM t.ts - b.at), 0)
  * 1000 * f.kr / nullif(f.kp, 0)) AS avail
 FROM f JOIN dsjob.flow_key_bucket b ON b.func = f.name AND f.kr > 0 CROSS JOIN t),
hd AS (
 SELECT kk.func, kk.k, (SELECT j.id FROM dsjob.jobs j WHERE j.func = kk.func AND j.k = kk.k
  AND j.state <= 1 AND j.k IS NOT NULL
  AND ((j.state = 0 AND j.owner IS DISTINCT FROM '(held)' AND (j.attempts > 0 OR j.run_at <= now()))
   OR (j.state = 1 AND j.attempts > 0 AND kk.sq = 1))
  ORDER BY j.id LIMIT 1) AS head
 FROM kk WHERE kk.sq > 0),
c AS (
 SELECT x.id, kk.func, kk.k, kk.n, kk.sq, kk.kc, kk.kr, coalesce(bz.busy, 0) AS busy,
  CASE WHEN kk.kr > 0 THEN coalesce(kb.avail, kk.kcap) END AS avail,
  row_number() OVER (PARTITION BY kk.func, kk.k ORDER BY x.prio, x.run_at, x.id) AS rn
 FROM kk LEFT JOIN bz ON bz.func = kk.func AND bz.k = kk.k
  LEFT JOIN kb ON kb.func = kk.func AND kb.k = kk.k
  CROSS JOIN LATERAL (
   SELECT j.id, j.prio, j.run_at FROM dsjob.jobs j
   WHERE kk.sq = 0 AND j.func = kk.func AND j.k = kk.k AND j.state = 0 AND j.k IS NOT NULL
    AND j.run_at <= now() AND (j.owner IS NULL OR (j.lease_until < now() AND j.owner <> $6::text))
    AND (j.deadline IS NULL OR j.deadline > now())
   ORDER BY j.prio, j.run_at, j.id LIMIT kk.n) x
 UNION ALL
 SELECT j.id, kk.func, kk.k, kk.n, kk.sq, kk.kc, kk.kr, coalesce(bz.busy, 0),
  CASE WHEN kk.kr > 0 THEN coalesce(kb.avail, kk.kcap) END, 1
 FROM kk JOIN hd ON hd.func = kk.func AND hd.k = kk.k
  JOIN dsjob.jobs j ON j.id = hd.head
  LEFT JOIN bz ON bz.func = kk.func AND bz.k = kk.k
  LEFT JOIN kb ON kb.func = kk.func AND kb.k = kk.k
 WHERE j.state = 0 AND j.run_at <= now()
  AND (j.owner IS NULL OR (j.lease_until < now() AND j.owner <> $6::text))
  AND (j.deadline IS NULL OR j.deadline > now())),
d AS (
 SELECT id, func, k, kr, avail, n, row_number() OVER (PARTITION BY func ORDER BY rn, id) AS fr FROM c
 WHERE CASE WHEN sq > 0 THEN busy = 0 AND (kr = 0 OR avail >= 1)
  ELSE (kc = 0 OR rn <= kc - busy) AND (kr = 0 OR rn <= floor(avail)) END),
s AS (
 SELECT j.id, d.func AS bf, d.k AS bk, d.kr, d.avail FROM dsjob.jobs j JOIN d ON d.id = j.id
 WHERE d.fr <= d.n AND j.state = 0 AND (j.owner IS NULL OR (j.lease_until < now() AND j.owner <> $6::text))
 ORDER BY j.id FOR UPDATE OF j SKIP LOCKED),
up AS (
 UPDATE dsjob.jobs j SET owner = $6::text, lease_until = now() + $7::int4 * interval '1 second'
 FROM s WHERE j.id = s.id AND j.id = ANY (ARRAY(SELECT id FROM s)) -- by jobs_pkey, not a scan
 RETURNING j.handle, j.func, j.uniq, j.unique_is_data, j.reducer, j.data, j.prio,
  extract(epoch from j.run_at)::bigint AS run_at, j.attempts, j.first_fail, j.last_fail, j.id,
  (extract(epoch from j.deadline) * 1000)::bigint AS deadline, s.bf, s.bk, s.kr, s.avail),
put AS (
 INSERT INTO dsjob.flow_key_bucket AS b (func, k, tokens, at)
 SELECT bf, bk, max(avail) - count(*), (SELECT ts FROM t) FROM up WHERE kr > 0 GROUP BY bf, bk
 ON CONFLICT (func, k) DO UPDATE SET tokens = excluded.tokens, at = excluded.at),
gone AS (
 DELETE FROM dsjob.flow_key_bucket b USING f, t
 WHERE b.func = f.name AND f.kr > 0
  AND b.tokens + greatest(extract(epoch FROM t.ts - b.at), 0) * 1000 * f.kr / nullif(f.kp, 0) >= f.kcap
  AND NOT EXISTS (SELECT 1 FROM up WHERE up.bf = b.func AND up.bk = b.k))
SELECT 3::int2, handle, func, uniq, unique_is_data, reducer, data, prio, run_at, attempts,
 first_fail, last_fail, id, deadline FROM up
