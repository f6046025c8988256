-- A schedule's tick (schedule.c), in one statement: the claim of tick $2
-- for the schedule $1 (last_tick only moves forward, so among servers one
-- claim wins) and, only with it, the tick's job: handle $3, function $4,
-- unique key $5, payload $6, priority $7, left to any server (no owner).
-- So a claim is never committed without its job: a server killed after
-- its claim has fired the tick. Returns whether the claim won and whether
-- the job went in (not if a live job of the function has the key), and
-- wakes the servers' LISTEN when it did.
WITH claim AS (
 UPDATE dsjob.schedules SET last_tick = $2::int8 WHERE name = $1::text AND last_tick < $2::int8
 RETURNING name),
ins AS (
 INSERT INTO dsjob.jobs (handle, func, uniq, data, prio)
 SELECT $3::text, $4::text, $5::bytea, $6::bytea, $7::int2 FROM claim
 ON CONFLICT (func, uniq) WHERE state = 0 AND uniq IS NOT NULL DO NOTHING
 RETURNING handle)
SELECT (SELECT count(*) FROM claim) AS claimed, (SELECT count(*) FROM ins) AS added,
 (SELECT count(*) FROM (SELECT pg_notify('dsjob', '') FROM ins) AS n) AS woken
