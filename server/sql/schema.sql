-- The schema: version 3 here, then the steps after it (schema_3_4.sql,
-- schema_4_5.sql, so that a new schema and an upgraded one are the same), to SCHEMA_VERSION
-- in store_postgres.c. To change it: bump that, and add a step file
-- (schema_1_2.sql is the model) that makes the new shape of the previous
-- one and moves the meta row, included at the end of this file. Never
-- reuse a number.
CREATE SCHEMA dsjob;
CREATE TABLE dsjob.meta (key text PRIMARY KEY, value text NOT NULL);
-- one number per server start: handles and owner
CREATE SEQUENCE dsjob.boot;
-- handles of dsjob.submit()
CREATE SEQUENCE dsjob.sql_handle;
CREATE TABLE dsjob.jobs (
 id bigserial PRIMARY KEY, -- submission order across servers
 handle text NOT NULL UNIQUE,
 func text NOT NULL,
 uniq bytea, -- NULL: no unique key, or unique "-" (coalesced per server only)
 unique_is_data boolean NOT NULL DEFAULT false,
 reducer bytea NOT NULL DEFAULT '',
 data bytea NOT NULL,
 prio smallint NOT NULL DEFAULT 1, -- 0 high, 1 normal, 2 low
 run_at timestamptz NOT NULL DEFAULT now(),
 state smallint NOT NULL DEFAULT 0, -- 0 live, 1 dead, 2-4 kept (enum store_state)
 attempts integer NOT NULL DEFAULT 0,
 first_fail bigint NOT NULL DEFAULT 0,
 last_fail bigint NOT NULL DEFAULT 0,
 result bytea,
 numerator integer NOT NULL DEFAULT 0,
 denominator integer NOT NULL DEFAULT 0,
 owner text, -- the server holding its lease, or NULL
 lease_until timestamptz,
 submitted timestamptz NOT NULL DEFAULT now(),
 deadline timestamptz); -- must start by, else it expires to the dead set; NULL: none
CREATE UNIQUE INDEX jobs_live_unique ON dsjob.jobs (func, uniq)
 WHERE state = 0 AND uniq IS NOT NULL;
CREATE INDEX jobs_ready ON dsjob.jobs (func, prio, run_at, id) WHERE state = 0;
CREATE INDEX jobs_owner ON dsjob.jobs (owner) WHERE owner IS NOT NULL AND state = 0;
CREATE INDEX jobs_ended_owner ON dsjob.jobs (owner) WHERE state <> 0;
CREATE INDEX jobs_deadline ON dsjob.jobs (deadline) WHERE state = 0 AND deadline IS NOT NULL;
-- the starts that may still run
CREATE TABLE dsjob.servers (owner text PRIMARY KEY, boot bigint NOT NULL,
 started timestamptz NOT NULL DEFAULT now());
CREATE TABLE dsjob.funcs (name text PRIMARY KEY, retries integer NOT NULL,
 backoff_base_ms integer NOT NULL, backoff_max_ms integer NOT NULL);
-- dsjob.submit: enqueue inside the caller's transaction. The job exists if
-- and only if that transaction commits; the NOTIFY is delivered at commit,
-- so a server takes it at once. Its lines end in \ (embed.sh joins them):
-- PostgreSQL keeps a function's text as given, and a schema made by an
-- earlier dsjobd has it on one line after #variable_conflict.
CREATE FUNCTION dsjob.submit(function text, payload bytea, uniq text DEFAULT NULL,
 priority text DEFAULT 'normal', run_at timestamptz DEFAULT NULL) RETURNS text
 LANGUAGE plpgsql AS $$\
#variable_conflict use_column
DECLARE h text; p smallint; u bytea := convert_to(submit.uniq, 'UTF8');\
BEGIN\
 p := CASE lower(submit.priority) WHEN 'high' THEN 0 WHEN 'normal' THEN 1\
      WHEN 'low' THEN 2 ELSE NULL END;\
 IF p IS NULL THEN\
  RAISE EXCEPTION 'dsjob.submit: priority must be high, normal or low, not %',\
   submit.priority;\
 END IF;\
 IF submit.function IS NULL OR submit.function = '' THEN\
  RAISE EXCEPTION 'dsjob.submit: function must not be empty';\
 END IF;\
 IF u = '' THEN u := NULL; END IF;\
 LOOP\
  INSERT INTO dsjob.jobs (handle, func, uniq, data, prio, run_at)\
   VALUES ('H:sql:' || nextval('dsjob.sql_handle'), submit.function, u,\
           coalesce(submit.payload, ''), p, coalesce(submit.run_at, now()))\
   ON CONFLICT (func, uniq) WHERE state = 0 AND uniq IS NOT NULL DO NOTHING\
   RETURNING handle INTO h;\
  IF h IS NOT NULL THEN\
   PERFORM pg_notify('dsjob', submit.function);\
   RETURN h;\
  END IF;\
  SELECT j.handle INTO h FROM dsjob.jobs j\
   WHERE j.func = submit.function AND j.uniq = u AND j.state = 0;\
  IF h IS NOT NULL THEN RETURN h; END IF;\
 END LOOP;\
END $$;
INSERT INTO dsjob.meta VALUES ('schema_version', '3');
\ir schema_3_4.sql
\ir schema_4_5.sql
