-- After the take, in its transaction: tokens granted by flow_take.sql
-- that found no job go back to their bucket. $1 the functions, $2 how many.
UPDATE dsjob.flow_bucket b SET tokens = b.tokens + t.n
FROM unnest($1::text[], $2::int4[]) AS t(name, n) WHERE b.name = t.name
