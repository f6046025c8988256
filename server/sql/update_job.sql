-- A rewrite of a job: $1 prio, $2 state, $3 attempts, $4 first_fail, $5
-- last_fail, $6 numerator, $7 denominator, $8 run-at in epoch seconds (0:
-- unchanged), $9 the result (NULL for none), $10 its handle, $11 the owner
-- it must have (NULL: any; a row this batch made is this server's own),
-- $12 the deadline in epoch ms (0: none: a job that started, or was
-- retried by hand, has none left: a deadline is for starting).
UPDATE dsjob.jobs SET prio = $1::int8, state = $2::int8, attempts = $3::int8,
 first_fail = $4::int8, last_fail = $5::int8, numerator = $6::int8, denominator = $7::int8,
 run_at = CASE WHEN $8::int8 > 0 THEN to_timestamp($8::int8) ELSE run_at END,
 result = $9::bytea,
 deadline = CASE WHEN $12::int8 > 0 THEN to_timestamp($12::int8 / 1000.0) END
WHERE handle = $10::text AND ($11::text IS NULL OR owner = $11::text)
