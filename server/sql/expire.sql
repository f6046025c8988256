-- At each renewal, before take_ended.sql: live jobs past their deadline
-- under no live lease go to the dead set, as a server's own expired jobs
-- do (result "expired", failed now), with no owner, so the take_ended.sql
-- of the same transaction takes them into this server's dead set.
UPDATE dsjob.jobs SET state = 1, owner = NULL, lease_until = NULL,
 result = convert_to('expired', 'UTF8'),
 first_fail = CASE WHEN first_fail = 0 THEN extract(epoch FROM now())::int8 ELSE first_fail END,
 last_fail = extract(epoch FROM now())::int8
WHERE state = 0 AND deadline <= now() AND (owner IS NULL OR lease_until < now())
