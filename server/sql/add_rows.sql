-- The rows of a batch's adds, from arrays: the INSERT that add.sql,
-- add_new.sql and main.sql share, put in their place by embed.sh where they
-- say \ir add_rows.sql. $1-$9 the columns, one array each (enum add_col in
-- store_postgres.c: handle, func, uniq, unique_is_data, reducer, data,
-- prio, run-at in epoch seconds or 0 for now, leased), $10 the owner, $11
-- the lease in seconds, $12 the batch each joins (NULL: none; an empty
-- array when none does, which unnest pads with NULLs), so that a member
-- costs no UPDATE of its row after (add.sql, or batch_join.sql after,
-- counts it in its batch). The rows go in as unnest makes them, in the
-- arrays' order, so that id keeps the submission order. No ORDER BY: a sort
-- under ON CONFLICT made the statement twice as slow (20,000 rows: 2.3-5.1
-- s against 1.0-2.1 s on a loaded machine). The unnests are in the select
-- list (a ProjectSet, which steps through the arrays together), not in FROM
-- (unnest(a, b, ...) is ROWS FROM, which first copies each array's rows
-- into a tuplestore of its own): 20,000 rows took 0.83x of the backend's
-- CPU time (5 rounds alternating, load 22).
 INSERT INTO dsjob.jobs (handle, func, uniq, unique_is_data, reducer, data, prio, run_at,
  owner, lease_until, batch)
 SELECT h, f, u, ud, r, d, p, CASE WHEN w > 0 THEN to_timestamp(w) ELSE now() END,
  CASE WHEN l THEN $10::text END,
  CASE WHEN l THEN now() + $11::int4 * interval '1 second' END, b
 FROM (SELECT unnest($1::text[]) AS h, unnest($2::text[]) AS f, unnest($3::bytea[]) AS u,
  unnest($4::bool[]) AS ud, unnest($5::bytea[]) AS r, unnest($6::bytea[]) AS d,
  unnest($7::int2[]) AS p, unnest($8::int8[]) AS w, unnest($9::bool[]) AS l,
  unnest($12::text[]) AS b) AS t
