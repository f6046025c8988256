-- The deadlines of the jobs a batch added, in its transaction after the
-- INSERT: $1 their handles, $2 their deadlines in epoch ms. Only a batch
-- with such a job runs it.
UPDATE dsjob.jobs SET deadline = to_timestamp(t.d / 1000.0)
FROM unnest($1::text[], $2::int8[]) AS t(h, d) WHERE handle = t.h AND state = 0
