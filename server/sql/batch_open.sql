-- admin "batch open": $1 the id, $2 its on_complete function, $3 its
-- on_success ('' none). Returns its row as batch_read.sql does, or none if
-- a batch of that id exists (on any server).
INSERT INTO dsjob.batches (id, on_complete, on_success) VALUES ($1::text, $2::text, $3::text)
ON CONFLICT (id) DO NOTHING
RETURNING id, on_complete, on_success, total, done, failed, dead, closed, fired_complete,
 fired_success, created, array_to_string(failed_handles, E'\n')
