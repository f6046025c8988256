-- A batch's one statement: its adds (INSERT), removes (DELETE), the jobs
-- its lease op takes (UPDATE ... FOR UPDATE SKIP LOCKED) or gives up (rows
-- under this server's lease that its queue lacks) and its NOTIFY, as
-- data-modifying CTEs whose RETURNING rows come back tagged by kind (enum
-- row_kind in store_postgres.c: 1 added, 2 removed, 3 taken, 4 notified,
-- 5 given up, 6 a batch member's end counted). An empty array leaves its part with nothing to do. No two
-- parts touch one row: the INSERT's rows are new, the DELETE's are this
-- server's and in its queue (a remove of a row this batch adds cancelled
-- that add), those given up are this server's and not in its queue, and
-- the take skips this server's (its own expired leases are renewed, not
-- taken).
-- $1-$12 the adds' columns, the owner, the lease and the batches
-- (add_rows.sql), $13 the handles to remove, $14 and $15 the functions to
-- take jobs of and how many of each, $16 the handles to give up, $17 whether to NOTIFY, $18
-- the outcome of each of $13 (enum store_state; 0: an end of no known
-- outcome, a failure), which dsjob.ended_many counts, once a batch, for
-- the live rows that are a batch's members or have children, in batch
-- order (two servers lock batches in the same order). The
-- taken rows' columns follow the kind: handle, func, uniq, unique_is_data,
-- reducer, data, prio, run-at (epoch seconds), attempts, first_fail,
-- last_fail, id (take_row), deadline (epoch ms, or NULL). A job past its
-- deadline is not taken: expire.sql moves it to the dead set.
WITH ins AS (
\ir add_rows.sql
 ON CONFLICT (func, uniq) WHERE state = 0 AND uniq IS NOT NULL DO NOTHING
 RETURNING handle),
del AS (
 DELETE FROM dsjob.jobs WHERE owner = $10::text AND handle = ANY($13::text[])
 RETURNING handle, batch, kids, state),
ends AS (
 SELECT dsjob.ended_many(e.batch, e.hs, e.os, e.ks) FROM (SELECT d.batch,
  array_agg(d.handle ORDER BY d.handle) AS hs, array_agg(u.o ORDER BY d.handle) AS os,
  array_agg(d.kids ORDER BY d.handle) AS ks FROM del d
  JOIN unnest($13::text[], $18::int2[]) AS u(h, o) ON u.h = d.handle
  WHERE (d.batch IS NOT NULL OR d.kids) AND d.state = 0 GROUP BY d.batch ORDER BY d.batch) e),
cl AS (
 UPDATE dsjob.jobs j SET owner = $10::text, lease_until = now() + $11::int4 * interval '1 second'
 FROM (SELECT c.id FROM unnest($14::text[], $15::int4[]) AS f(name, n),
  LATERAL (SELECT id FROM dsjob.jobs WHERE state = 0 AND func = f.name AND run_at <= now()
   AND (owner IS NULL OR (lease_until < now() AND owner <> $10::text))
   AND (deadline IS NULL OR deadline > now())
   ORDER BY prio, run_at, id LIMIT f.n FOR UPDATE SKIP LOCKED) c) s
 WHERE j.id = s.id
 RETURNING j.handle, j.func, j.uniq, j.unique_is_data, j.reducer, j.data, j.prio,
  extract(epoch from j.run_at)::bigint, j.attempts, j.first_fail, j.last_fail, j.id,
  (extract(epoch from j.deadline) * 1000)::bigint),
rel AS (
 UPDATE dsjob.jobs SET owner = NULL, lease_until = NULL
 WHERE state = 0 AND owner = $10::text AND handle = ANY($16::text[])
 RETURNING handle)
SELECT 1::int2, handle, NULL::text, NULL::bytea, NULL::bool, NULL::bytea, NULL::bytea,
 NULL::int2, NULL::int8, NULL::int4, NULL::int8, NULL::int8, NULL::int8, NULL::int8 FROM ins
UNION ALL SELECT 2::int2, handle, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL FROM del
UNION ALL SELECT 3::int2, * FROM cl
UNION ALL SELECT 5::int2, handle, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL FROM rel
UNION ALL SELECT 6::int2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL FROM ends
UNION ALL SELECT 4::int2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL FROM pg_notify('dsjob', '') WHERE $17::bool
