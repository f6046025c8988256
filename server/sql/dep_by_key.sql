-- A parent named "unique:FUNCTION:UNIQUE" that its child's server does not
-- hold (store_postgres.c's deps_by_key, before deps_add.sql): the handle of
-- the table's job of function $1 and unique key $2, live first, else the
-- newest ended one (kept or dead), any server's, this batch's adds
-- included, but not $3, the child itself (inserted with that key just
-- before). None found: no row (deps_add refuses the child, naming it).
SELECT handle FROM dsjob.jobs WHERE func = $1::text AND uniq = $2::bytea
 AND handle <> $3::text ORDER BY state = 0 DESC, id DESC LIMIT 1
