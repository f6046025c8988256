-- After the INSERT of a batch's adds, in its transaction: those that join
-- a batch, $1 their handles and $2 the batches' ids. A row whose batch is
-- there and open becomes its member (jobs.batch) and is counted in its
-- total; one whose batch is not there or closed is deleted, and its handle
-- returned: that add is refused. The batch's row is locked first, so a
-- close or the end of its last member on another server goes before or
-- after, never between. An add that coalesced onto a live job has no row
-- and joins nothing.
WITH m AS (SELECT h, b FROM unnest($1::text[], $2::text[]) AS t(h, b)),
open AS (
 SELECT id FROM dsjob.batches WHERE id IN (SELECT b FROM m) AND NOT closed ORDER BY id
 FOR UPDATE),
mem AS (
 UPDATE dsjob.jobs j SET batch = m.b FROM m
 WHERE j.handle = m.h AND m.b IN (SELECT id FROM open)
 RETURNING j.batch),
cnt AS (
 UPDATE dsjob.batches s SET total = s.total + c.n
 FROM (SELECT batch, count(*) AS n FROM mem GROUP BY batch) c WHERE s.id = c.batch
 RETURNING s.id),
gone AS (
 DELETE FROM dsjob.jobs j USING m
 WHERE j.handle = m.h AND m.b NOT IN (SELECT id FROM open)
 RETURNING j.handle, m.b)
SELECT handle, b FROM gone
