-- Before the transaction of a lease op that takes functions by key
-- (key_take.sql), in one of its own (store_postgres.c's key_fill): the
-- functions it takes, $1, keyed with their separators, $2 (dsjob.key_fill,
-- schema_4_5.sql): a function new to dsjob.key_sep, or whose separator
-- changed, has its rows' keys written again (the first such fill makes the
-- trigger jobs_keyed); otherwise nothing is written.
SELECT dsjob.key_fill($1::text[], $2::text[])
