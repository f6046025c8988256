-- Try this start's live lock ($1, $2), and name the backend that holds it.
SELECT pg_try_advisory_lock($1::int4, $2::int4),
 (SELECT pid FROM pg_locks WHERE locktype = 'advisory'
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid = $1::int4::oid AND objid = $2::int4::oid AND objsubid = 2
  AND granted AND pid <> pg_backend_pid() LIMIT 1)
