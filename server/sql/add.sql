-- A batch's adds, from arrays: one statement whatever their number. $1-$12
-- as add_rows.sql, $13 whether to NOTIFY (the batch leaves jobs for other
-- servers). Returns the handles inserted (one that coalesced onto a live
-- job is not among them), and a NULL row for the NOTIFY.
WITH ins AS (
\ir add_rows.sql
 ON CONFLICT (func, uniq) WHERE state = 0 AND uniq IS NOT NULL DO NOTHING
 RETURNING handle)
SELECT handle FROM ins
UNION ALL SELECT NULL FROM pg_notify('dsjob', '') WHERE $13::bool
