-- A batch's adds as add.sql, when none of them is expected to coalesce:
-- without ON CONFLICT, whose speculative insertion (an arbiter check, then
-- a confirmation, per row) cost a third of the statement's time (20,000
-- rows with unique keys: 1.1-1.4 s plain against 1.5-2.0 s with it, psql,
-- load 17). An add whose unique key a live job holds fails the whole
-- statement with a unique violation of jobs_live_unique, which rolls it
-- back; the store then sends add.sql, and keeps sending it for a while
-- (flush_adds_only). Same values as add.sql; returns only the NOTIFY's
-- NULL row: every add is inserted or none is.
WITH ins AS (
 INSERT INTO dsjob.jobs (handle, func, uniq, unique_is_data, reducer, data, prio, run_at,
  owner, lease_until)
 SELECT h, f, u, ud, r, d, p, CASE WHEN w > 0 THEN to_timestamp(w) ELSE now() END,
  CASE WHEN l THEN $10::text END,
  CASE WHEN l THEN now() + $11::int4 * interval '1 second' END
 FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bool[], $5::bytea[], $6::bytea[],
  $7::int2[], $8::int8[], $9::bool[]) AS t(h, f, u, ud, r, d, p, w, l))
SELECT NULL::text FROM pg_notify('dsjob', '') WHERE $12::bool
