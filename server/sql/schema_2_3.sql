-- Version 2 to 3: a job's deadline (OPTION_REQ expire-in or deadline, or
-- its function's maximum queue age on the server it was submitted to): a
-- job not started by then is taken by no server and goes to the dead set
-- as "expired".
ALTER TABLE dsjob.jobs ADD COLUMN deadline timestamptz;
CREATE INDEX jobs_deadline ON dsjob.jobs (deadline) WHERE state = 0 AND deadline IS NOT NULL;
UPDATE dsjob.meta SET value = '3' WHERE key = 'schema_version';
