-- Version 3 to 4: batches (batch.c) across the servers that share the
-- table. A batch is a row of dsjob.batches with its counters; a member's
-- job row names it (jobs.batch, set by batch_join.sql in the transaction
-- of its INSERT). dsjob.ended moves the counters in the transaction of the
-- member's end: main.sql calls it for each live member its DELETE ends,
-- with the outcome the ending server gives, and the trigger jobs_ended for
-- a rewrite that ends a live member (to the dead set, a kept result, an
-- expiry). The call that ends the last member of a closed batch, or the
-- close that finds every member ended (batch_admin.sql), inserts the
-- batch's callback jobs (dsjob.batch_fire) under the batch's row lock, so
-- each is submitted once whichever server ended what. schema.sql ends with
-- this file, so that a new schema and an upgraded one are the same.
ALTER TABLE dsjob.jobs ADD COLUMN batch text; -- the batch it is a member of, or NULL
CREATE INDEX jobs_batch ON dsjob.jobs (batch) WHERE batch IS NOT NULL;
CREATE TABLE dsjob.batches (
 id text PRIMARY KEY,
 on_complete text NOT NULL DEFAULT '', -- function of its on_complete job, '' none
 on_success text NOT NULL DEFAULT '',
 total bigint NOT NULL DEFAULT 0, -- members that joined
 done bigint NOT NULL DEFAULT 0, -- ... ended with WORK_COMPLETE
 failed bigint NOT NULL DEFAULT 0, -- ... ended otherwise
 dead bigint NOT NULL DEFAULT 0, -- ... went to the dead set
 failed_handles text[] NOT NULL DEFAULT '{}', -- the first 1000 failed or dead (BATCH_FAILED_MAX)
 closed boolean NOT NULL DEFAULT false,
 fired_complete boolean NOT NULL DEFAULT false,
 fired_success boolean NOT NULL DEFAULT false,
 complete_job text, -- the handle of its on_complete job, once fired
 success_job text,
 created bigint NOT NULL DEFAULT extract(epoch FROM now())::bigint);
-- Fire what is due of batch bid: its callback jobs, each a background job
-- of its function with unique key batch:ID:complete or batch:ID:success
-- and the batch's summary (JSON, as batch.c's summary) as payload, under
-- no server's lease. Returns how many it fired.
CREATE FUNCTION dsjob.batch_fire(bid text) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
 b dsjob.batches; which text; fn text; h text; k bytea; body text; n integer := 0;
BEGIN
 SELECT * INTO b FROM dsjob.batches WHERE id = bid FOR UPDATE;
 IF NOT FOUND OR NOT b.closed OR b.done + b.failed + b.dead < b.total THEN
  RETURN 0;
 END IF;
 FOREACH which IN ARRAY ARRAY['complete', 'success'] LOOP
  IF which = 'complete' THEN
   CONTINUE WHEN b.on_complete = '' OR b.fired_complete;
   fn := b.on_complete;
  ELSE
   CONTINUE WHEN b.on_success = '' OR b.fired_success OR b.done <> b.total;
   fn := b.on_success;
  END IF;
  body := '{"batch":' || to_json(b.id)::text || ',"callback":"' || which || '","total":'
   || b.total || ',"done":' || b.done || ',"failed":' || b.failed || ',"dead":' || b.dead
   || ',"failed_handles":[' || coalesce((SELECT string_agg(to_json(x)::text, ',' ORDER BY i)
   FROM unnest(b.failed_handles) WITH ORDINALITY AS t(x, i)), '')
   || '],"failed_handles_omitted":' || (b.failed + b.dead - cardinality(b.failed_handles)) || '}';
  k := convert_to('batch:' || b.id || ':' || which, 'UTF8');
  h := NULL;
  INSERT INTO dsjob.jobs (handle, func, uniq, data)
   VALUES ('H:sql:' || nextval('dsjob.sql_handle'), fn, k, convert_to(body, 'UTF8'))
   ON CONFLICT (func, uniq) WHERE state = 0 AND uniq IS NOT NULL DO NOTHING
   RETURNING handle INTO h;
  IF h IS NULL THEN
   SELECT j.handle INTO h FROM dsjob.jobs j WHERE j.func = fn AND j.uniq = k AND j.state = 0;
  END IF;
  IF which = 'complete' THEN
   UPDATE dsjob.batches SET fired_complete = true, complete_job = h WHERE id = bid;
  ELSE
   UPDATE dsjob.batches SET fired_success = true, success_job = h WHERE id = bid;
  END IF;
  n := n + 1;
 END LOOP;
 IF n > 0 THEN
  PERFORM pg_notify('dsjob', '');
 END IF;
 RETURN n;
END $$;
-- A live job h ended with outcome (enum store_state: 1 dead, 2 complete,
-- 3 failed, 4 exception; 0 or else: failed): the counters of its batch bid
-- move, and what became due fires. A batch dropped meanwhile counts
-- nothing. Returns 1 if it counted, plus the callbacks fired.
CREATE FUNCTION dsjob.ended(h text, bid text, outcome integer) RETURNS integer
 LANGUAGE plpgsql AS $$
DECLARE
 b dsjob.batches;
BEGIN
 IF bid IS NULL THEN
  RETURN 0;
 END IF;
 UPDATE dsjob.batches SET done = done + (outcome = 2)::int, dead = dead + (outcome = 1)::int,
  failed = failed + (outcome NOT IN (1, 2))::int,
  failed_handles = CASE WHEN outcome <> 2 AND cardinality(failed_handles) < 1000
   THEN failed_handles || h ELSE failed_handles END
 WHERE id = bid RETURNING * INTO b;
 IF NOT FOUND THEN
  RETURN 0;
 END IF;
 IF b.closed AND b.done + b.failed + b.dead >= b.total THEN
  RETURN 1 + dsjob.batch_fire(bid);
 END IF;
 RETURN 1;
END $$;
CREATE FUNCTION dsjob.jobs_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
 PERFORM dsjob.ended(OLD.handle, OLD.batch, NEW.state);
 RETURN NULL;
END $$;
-- admin "batch close": closed, and what is due fires. False: no such batch.
CREATE FUNCTION dsjob.batch_close(bid text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
 UPDATE dsjob.batches SET closed = true WHERE id = bid;
 IF NOT FOUND THEN
  RETURN false;
 END IF;
 PERFORM dsjob.batch_fire(bid);
 RETURN true;
END $$;
-- admin "batch drop": the row goes; its live members run on, no member of
-- any batch (a batch opened again with that id does not count them).
CREATE FUNCTION dsjob.batch_drop(bid text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
 DELETE FROM dsjob.batches WHERE id = bid;
 IF NOT FOUND THEN
  RETURN false;
 END IF;
 UPDATE dsjob.jobs SET batch = NULL WHERE batch = bid;
 RETURN true;
END $$;
CREATE TRIGGER jobs_ended AFTER UPDATE OF state ON dsjob.jobs FOR EACH ROW
 WHEN (OLD.state = 0 AND NEW.state <> 0 AND OLD.batch IS NOT NULL)
 EXECUTE PROCEDURE dsjob.jobs_ended();
UPDATE dsjob.meta SET value = '4' WHERE key = 'schema_version';
