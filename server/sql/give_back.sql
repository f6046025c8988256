-- At close: give back what this server ($1) holds, its dead set and kept
-- results too, so that the others take them at once; and leave the list.
WITH g AS (
 UPDATE dsjob.jobs SET owner = NULL, lease_until = NULL WHERE owner = $1::text RETURNING 1),
s AS (DELETE FROM dsjob.servers WHERE owner = $1::text RETURNING 1)
SELECT (SELECT count(*) FROM g), (SELECT count(*) FROM s), pg_notify('dsjob', '')
