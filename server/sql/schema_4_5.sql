-- Version 4 to 5: a job's partition key in a column of its own (k), so
-- that a take of a keyed function (key_take.sql) reads each key's first
-- jobs through an index, not every live row of the function. A key is
-- the unique key's part before the function's separator ('' without one,
-- dsjob.key_of, as flow_key_of makes it). k is set only for the functions
-- in dsjob.key_sep (those a server took by key, with the separator it
-- used): by the statement trigger jobs_keyed after each INSERT, for the
-- rows it made, and by key_fill.sql for the rows already there when a
-- function joins the table or its separator changes. Every other row
-- keeps k NULL and is in neither index. The trigger is made by the first
-- key fill, not here: a statement trigger with a transition table keeps
-- a copy of every row an INSERT makes, which cost a database whose
-- functions have no keys 1.3x the time of a 20,000-row INSERT (6 rounds
-- alternating, load 6-7); once made, a function without keys pays one
-- trigger call and one shared advisory lock a statement. The trigger
-- takes that lock (one for all functions, so that a batch of many
-- functions holds one lock, not one each) before it reads dsjob.key_sep;
-- key_fill.sql takes it exclusive before it writes a row of
-- dsjob.key_sep or makes the trigger (a function's first take by key, or
-- a separator changed: rare), so it waits for the inserts in flight to
-- commit, and a row inserted meanwhile is either seen by the refill or
-- keyed by its trigger with the new separator. schema.sql ends with this
-- file, so that a new schema and an upgraded one are the same.
-- (Self-contained: another step of version 5 may be added beside it.)
ALTER TABLE dsjob.jobs ADD COLUMN k bytea; -- its partition key, NULL: not keyed
CREATE INDEX jobs_key ON dsjob.jobs (func, k, id) WHERE state <= 1 AND k IS NOT NULL;
CREATE INDEX jobs_key_ready ON dsjob.jobs (func, k, prio, run_at, id)
 WHERE state = 0 AND k IS NOT NULL;
CREATE TABLE dsjob.key_sep (func text PRIMARY KEY, sep bytea NOT NULL);
CREATE FUNCTION dsjob.key_of(u bytea, sep bytea) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
 SELECT CASE WHEN u IS NULL OR position(sep IN u) = 0 THEN ''::bytea
  ELSE substring(u FROM 1 FOR position(sep IN u) - 1) END $$;
CREATE FUNCTION dsjob.jobs_keyed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
 IF NOT EXISTS (SELECT 1 FROM new_rows) THEN
  RETURN NULL;
 END IF;
 -- Before dsjob.key_sep is read: a refill waits for this insert to commit.
 PERFORM pg_advisory_xact_lock_shared(hashtextextended('dsjob.key', 0));
 IF NOT EXISTS (SELECT 1 FROM dsjob.key_sep) THEN
  RETURN NULL; -- no function is taken by key
 END IF;
 UPDATE dsjob.jobs j SET k = dsjob.key_of(n.uniq, s.sep)
  FROM new_rows n JOIN dsjob.key_sep s ON s.func = n.func
  WHERE j.id = n.id AND j.k IS NULL;
 RETURN NULL;
END $$;
-- key_fill.sql, before each key take: each function of fs whose row of
-- dsjob.key_sep is missing or has another separator than seps says gets
-- it, and its rows their keys, under the exclusive lock. Returns the rows
-- keyed (0 when nothing changed, the usual case).
CREATE FUNCTION dsjob.key_fill(fs text[], seps text[]) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE f text; s bytea; n bigint := 0; m bigint;
BEGIN
 FOR f, s IN SELECT u.f, convert_to(u.s, 'UTF8') FROM unnest(fs, seps) AS u(f, s)
  LEFT JOIN dsjob.key_sep ks ON ks.func = u.f
  WHERE ks.sep IS DISTINCT FROM convert_to(u.s, 'UTF8') ORDER BY u.f LOOP
  PERFORM pg_advisory_xact_lock(hashtextextended('dsjob.key', 0));
  IF NOT EXISTS (SELECT 1 FROM pg_trigger
                 WHERE tgrelid = 'dsjob.jobs'::regclass AND tgname = 'jobs_keyed') THEN
   CREATE TRIGGER jobs_keyed AFTER INSERT ON dsjob.jobs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE PROCEDURE dsjob.jobs_keyed();
  END IF;
  INSERT INTO dsjob.key_sep VALUES (f, s) ON CONFLICT (func) DO UPDATE SET sep = excluded.sep;
  UPDATE dsjob.jobs SET k = dsjob.key_of(uniq, s) WHERE func = f AND state <= 1;
  GET DIAGNOSTICS m = ROW_COUNT;
  n := n + m;
 END LOOP;
 RETURN n;
END $$;
UPDATE dsjob.meta SET value = '5' WHERE key = 'schema_version';
