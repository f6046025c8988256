-- Version 1 to 2: the starts that may still run (dsjob.servers, so that a
-- running server finds those that are over without reading the table of
-- jobs), and jobs_owner on live rows only (a renewal no longer reads a
-- server's dead set and kept results), with the ended rows by owner beside
-- it. Starts that own rows are listed, so their ended rows are found when
-- they are over.
DROP INDEX dsjob.jobs_owner;
CREATE INDEX jobs_owner ON dsjob.jobs (owner) WHERE owner IS NOT NULL AND state = 0;
CREATE INDEX jobs_ended_owner ON dsjob.jobs (owner) WHERE state <> 0;
CREATE TABLE dsjob.servers (owner text PRIMARY KEY, boot bigint NOT NULL,
 started timestamptz NOT NULL DEFAULT now());
INSERT INTO dsjob.servers (owner, boot)
 SELECT DISTINCT owner, substring(owner FROM '\.([0-9]+)$')::bigint FROM dsjob.jobs
 WHERE owner ~ '\.[0-9]+$';
UPDATE dsjob.meta SET value = '2' WHERE key = 'schema_version';
