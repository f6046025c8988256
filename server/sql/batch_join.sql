-- After the INSERT of a batch's adds in main.sql, or of adds that also
-- write dependency edges (add.sql joins the others itself), which wrote
-- each member's batch (add_rows.sql), in its transaction: $1 the batches the adds join and $2
-- how many rows each gained (an add that coalesced onto a live job, or was
-- refused for its parents, has no row and joins nothing). An open batch's
-- total grows by its count, one UPDATE a batch, not a member; the ids of
-- those not there or closed come back, and the store deletes the rows of
-- their members (batch_refuse.sql) and refuses those adds. The batches'
-- rows are locked first, in id order, so that a close or the end of a
-- batch's last member on another server goes before or after, never
-- between.
WITH c AS (SELECT b, n FROM unnest($1::text[], $2::int8[]) AS t(b, n)),
open AS (
 SELECT id FROM dsjob.batches WHERE id IN (SELECT b FROM c) AND NOT closed ORDER BY id
 FOR UPDATE),
cnt AS (
 UPDATE dsjob.batches s SET total = s.total + c.n FROM c
 WHERE s.id = c.b AND s.id IN (SELECT id FROM open))
SELECT b FROM c WHERE b NOT IN (SELECT id FROM open)
