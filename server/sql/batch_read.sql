-- admin "batch status ID" ($1 the id) or "batch list" ($1 NULL): the
-- batches' rows, oldest first, as struct store_batch (pg_batch_row).
SELECT id, on_complete, on_success, total, done, failed, dead, closed, fired_complete,
 fired_success, created, array_to_string(failed_handles, E'\n')
FROM dsjob.batches WHERE $1::text IS NULL OR id = $1::text
ORDER BY created, id
