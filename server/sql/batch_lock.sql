-- At the start of a transaction that rewrites jobs: lock the batches that
-- its rewrites (an end to the dead set or a kept result, through the
-- trigger jobs_ended) and its removes (main.sql's ends) may count in, in
-- the order of their ids, as main.sql's ends and batch_join.sql lock
-- them. The trigger counts a rewrite's end when the row changes, in the
-- order of the batch's rewrites: two servers ending members of the same
-- batches in turn would otherwise each hold one batch and wait for the
-- other's (a deadlock, SQLSTATE 40P01). $1 the handles rewritten and
-- removed; $2 the batches its adds join after (batch_join.sql), which
-- main.sql's ends would otherwise lock before them, each set in id order
-- but not the two together: a server ending a member of b while adding one
-- to a, and another ending one of a while adding one to b, would each hold
-- one and wait for the other. A parent's end that moves children in other
-- batches (dsjob.deps_ended) can still lock out of order: such a batch is
-- sent again (--pg-conflict-retries).
SELECT b.id FROM dsjob.batches b
WHERE b.id IN (SELECT j.batch FROM dsjob.jobs j
 WHERE j.handle = ANY($1::text[]) AND j.state = 0 AND j.batch IS NOT NULL)
 OR b.id = ANY($2::text[])
ORDER BY b.id FOR UPDATE OF b
