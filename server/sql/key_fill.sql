-- Before key_take.sql, in its transaction: the functions it takes, $1,
-- keyed with their separators, $2 (dsjob.key_fill, schema_4_5.sql): a
-- function new to dsjob.key_sep, or whose separator changed, has its rows'
-- keys written again; otherwise nothing is written.
SELECT dsjob.key_fill($1::text[], $2::text[])
