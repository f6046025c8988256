-- Take the dead jobs and kept results no running server holds: those with
-- no owner and those of starts that are over (their live lock, $2 and the
-- start's number, is free), which leave dsjob.servers. $1 the owner. The
-- columns are the taken rows' of main.sql, then state, result, numerator,
-- denominator; in submission order.
-- The gone starts are read once, as an array (an InitPlan): a row that
-- another server's take changed under this one is checked again
-- (EvalPlanQual), and a subquery reading gone there would run the DELETE
-- again, which PostgreSQL refuses ("ModifyTable should not be called
-- during EvalPlanQual").
WITH gone AS (
 DELETE FROM dsjob.servers s
 WHERE CASE WHEN s.owner <> $1::text
  THEN pg_try_advisory_xact_lock($2::int4, (s.boot % 2147483647)::int) ELSE false END
 RETURNING s.owner),
t AS (
 UPDATE dsjob.jobs j SET owner = $1::text, lease_until = NULL
 WHERE j.state <> 0
  AND (j.owner IS NULL OR j.owner = ANY ((SELECT array_agg(owner) FROM gone)::text[]))
 RETURNING 0::int2, j.handle, j.func, j.uniq, j.unique_is_data, j.reducer, j.data, j.prio,
  extract(epoch from j.run_at)::bigint, j.attempts, j.first_fail, j.last_fail, j.id,
  j.state, j.result, j.numerator, j.denominator)
SELECT * FROM t ORDER BY id
