-- A batch's adds, from arrays: one statement whatever their number. $1-$12
-- as add_rows.sql, $13 whether to NOTIFY (the batch leaves jobs for other
-- servers), $14 whether the statement joins its adds to their batches
-- ($12): then it locks the open ones first (in id order, so that a close
-- or the end of a batch's last member on another server goes before or
-- after, never between), inserts only the adds of open batches (and those
-- of none), and moves each batch's total by the rows it inserted, so that
-- a batch's submits cost no statement of their own; else (a batch that
-- also writes dependency edges, which may refuse a row after) the rows
-- carry their batch and batch_join.sql counts them after. Returns the
-- handles inserted in the first column (one that coalesced onto a live
-- job, or whose batch is not open, is not among them), the ids of the
-- open batches in the second, and a row of NULLs for the NOTIFY.
WITH open AS (
 SELECT id FROM dsjob.batches WHERE $14::bool AND id IN (SELECT unnest($12::text[]))
  AND NOT closed ORDER BY id FOR UPDATE),
ins AS (
\ir add_rows.sql
 WHERE b IS NULL OR NOT $14::bool OR b IN (SELECT id FROM open)
 ON CONFLICT (func, uniq) WHERE state = 0 AND uniq IS NOT NULL DO NOTHING
 RETURNING handle, batch),
cnt AS (
 UPDATE dsjob.batches s SET total = s.total + c.n
 FROM (SELECT batch, count(*) AS n FROM ins WHERE batch IS NOT NULL GROUP BY batch) c
 WHERE $14::bool AND s.id = c.batch)
SELECT handle, NULL::text FROM ins
UNION ALL SELECT NULL, NULL FROM pg_notify('dsjob', '') WHERE $13::bool
UNION ALL SELECT NULL, id FROM open
