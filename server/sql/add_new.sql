-- A batch's adds as add.sql, when none of them is expected to coalesce:
-- without ON CONFLICT, whose speculative insertion (an arbiter check, then
-- a confirmation, per row) cost a third of the statement's time (20,000
-- rows with unique keys: 1.1-1.4 s plain against 1.5-2.0 s with it, psql,
-- load 17). An add whose unique key a live job holds fails the whole
-- statement with a unique violation of jobs_live_unique, which rolls it
-- back; the store then sends add.sql, and keeps sending it for a while
-- (flush_adds_only). Same values as add.sql, batches joined the same way
-- (every add of an open batch is inserted, so each batch's total moves by
-- its adds in $12); returns the NOTIFY's NULL row and the ids of the open
-- batches: every other add is inserted or none is.
WITH open AS (
 SELECT id FROM dsjob.batches WHERE $14::bool AND id IN (SELECT unnest($12::text[]))
  AND NOT closed ORDER BY id FOR UPDATE),
ins AS (
\ir add_rows.sql
 WHERE b IS NULL OR NOT $14::bool OR b IN (SELECT id FROM open)
),
cnt AS (
 UPDATE dsjob.batches s SET total = s.total + c.n
 FROM (SELECT b, count(*) AS n FROM unnest($12::text[]) AS b
  WHERE $14::bool AND b IN (SELECT id FROM open) GROUP BY b) c
 WHERE s.id = c.b)
SELECT NULL::text FROM pg_notify('dsjob', '') WHERE $13::bool
UNION ALL SELECT id FROM open
