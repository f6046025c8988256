-- A batch's adds as add.sql, when none of them is expected to coalesce:
-- without ON CONFLICT, whose speculative insertion (an arbiter check, then
-- a confirmation, per row) cost a third of the statement's time (20,000
-- rows with unique keys: 1.1-1.4 s plain against 1.5-2.0 s with it, psql,
-- load 17). An add whose unique key a live job holds fails the whole
-- statement with a unique violation of jobs_live_unique, which rolls it
-- back; the store then sends add.sql, and keeps sending it for a while
-- (flush_adds_only). Same values as add.sql; returns only the NOTIFY's
-- NULL row: every add is inserted or none is.
WITH ins AS (
\ir add_rows.sql
)
SELECT NULL::text FROM pg_notify('dsjob', '') WHERE $13::bool
