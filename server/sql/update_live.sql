-- The rewrites of live jobs this server holds, one statement a batch: the
-- starts of jobs with a deadline (a deadline is for starting: a job that
-- started has none left, so that a crash runs it again rather than
-- expiring it), a priority changed, a retry's backoff, a dead job retried
-- by hand; each as update_job.sql's with state 0 and no result. $1 their
-- handles, $2 prio, $3 attempts, $4 first_fail, $5 last_fail, $6
-- numerator, $7 denominator, $8 run-at in epoch seconds (0: unchanged),
-- $9 the deadline in epoch ms (0: none), $10 the owner each row must have.
-- Returns the handles rewritten (a row missing was another server's).
UPDATE dsjob.jobs j SET prio = u.p, state = 0, attempts = u.a, first_fail = u.ff,
 last_fail = u.lf, numerator = u.nu, denominator = u.de,
 run_at = CASE WHEN u.ra > 0 THEN to_timestamp(u.ra) ELSE j.run_at END, result = NULL,
 deadline = CASE WHEN u.dl > 0 THEN to_timestamp(u.dl / 1000.0) END
FROM unnest($1::text[], $2::int2[], $3::int8[], $4::int8[], $5::int8[], $6::int8[], $7::int8[],
 $8::int8[], $9::int8[]) AS u(h, p, a, ff, lf, nu, de, ra, dl)
WHERE j.handle = u.h AND j.owner = $10::text
RETURNING j.handle
