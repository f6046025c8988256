-- Version 3 to 4: batches (batch.c) and dependencies (deps.c) across the
-- servers that share the table. A batch is a row of dsjob.batches with
-- its counters; a member's job row names it (jobs.batch, written by its
-- INSERT, add_rows.sql, and counted in add.sql or batch_join.sql in the
-- same transaction). dsjob.ended_many
-- (dsjob.ended for one job) moves the counters in the transaction of the
-- member's end: main.sql calls it for the live members its DELETE ends,
-- once a batch, with the outcomes the ending server gives, and the trigger
-- jobs_ended (before the row changes) for a rewrite that ends a live
-- member (to the dead set, a kept result, an expiry). The call that ends
-- the last member of a closed batch, or the
-- close that finds every member ended (dsjob.batch_close), inserts the
-- batch's callback jobs (dsjob.batch_fire) under the batch's row lock, so
-- each is submitted once whichever server ended what.
-- A child (OPTION_REQ after=) is a row held under the owner '(held)', with
-- a lease that never runs out, so that no server takes it; its edges are
-- rows of dsjob.deps (deps_add.sql, in the commit of its add), and each
-- parent's row says it has children (kids). The end of a parent, through
-- dsjob.ended as above, moves its edges and releases, fails or cancels
-- its children in its own transaction, under each child's row lock, so of
-- two parents ending at once on two servers the second sees the first.
-- schema.sql ends with this file, so that a new schema and an upgraded
-- one are the same.
ALTER TABLE dsjob.jobs ADD COLUMN batch text; -- the batch it is a member of, or NULL
ALTER TABLE dsjob.jobs ADD COLUMN kids boolean NOT NULL DEFAULT false; -- a child waits for it
CREATE TABLE dsjob.deps (
 child text NOT NULL, -- the waiting job's handle
 parent text NOT NULL, -- the handle of a job it waits for
 policy smallint NOT NULL, -- if the parent fails for good: 0 fail, 1 cancel, 2 run (deps.h)
 state smallint NOT NULL DEFAULT 0, -- 0 waiting, 1 the parent succeeded, 2 it failed
 PRIMARY KEY (child, parent));
CREATE INDEX deps_parent ON dsjob.deps (parent) WHERE state = 0;
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
-- Child c's parents have all ended, none failing it: it runs, on any server.
CREATE FUNCTION dsjob.dep_release(c text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
 DELETE FROM dsjob.deps WHERE child = c;
 UPDATE dsjob.jobs SET owner = NULL, lease_until = NULL WHERE handle = c AND owner = '(held)';
 IF FOUND THEN
  PERFORM pg_notify('dsjob', '');
 END IF;
END $$;
-- The edges of parent h, which ended with outcome: each child stops waiting
-- for it; one waiting for nothing more runs; one whose policy does not let
-- it run after a failed parent fails (to the dead set, "parent H failed")
-- or is cancelled (gone), and its own end goes on to its batch and its
-- children (dsjob.ended again).
CREATE FUNCTION dsjob.deps_ended(h text, outcome integer) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
 e record; j record; now_s int8 := extract(epoch FROM now())::int8;
BEGIN
 FOR e IN SELECT child, policy FROM dsjob.deps WHERE parent = h AND state = 0 ORDER BY child
 LOOP
  -- The child's row first: two parents' ends go one after the other.
  PERFORM 1 FROM dsjob.jobs WHERE handle = e.child FOR UPDATE;
  UPDATE dsjob.deps SET state = CASE WHEN outcome = 2 THEN 1 ELSE 2 END
  WHERE child = e.child AND parent = h AND state = 0;
  CONTINUE WHEN NOT FOUND;
  IF outcome = 2 OR e.policy = 2 THEN
   IF NOT EXISTS (SELECT 1 FROM dsjob.deps WHERE child = e.child AND state = 0) THEN
    PERFORM dsjob.dep_release(e.child);
   END IF;
  ELSIF e.policy = 0 THEN
   DELETE FROM dsjob.deps WHERE child = e.child;
   -- jobs_ended takes the end on to its batch and children.
   UPDATE dsjob.jobs SET state = 1, owner = NULL, lease_until = NULL,
    result = convert_to('parent ' || h || ' failed', 'UTF8'), attempts = attempts + 1,
    first_fail = now_s, last_fail = now_s
   WHERE handle = e.child AND state = 0 AND owner = '(held)';
  ELSE
   DELETE FROM dsjob.deps WHERE child = e.child;
   DELETE FROM dsjob.jobs WHERE handle = e.child AND state = 0 AND owner = '(held)'
   RETURNING batch, kids INTO j;
   IF FOUND AND (j.batch IS NOT NULL OR j.kids) THEN
    PERFORM dsjob.ended(e.child, j.batch, 3);
   END IF;
  END IF;
 END LOOP;
END $$;
-- Live jobs hs ended with outcomes os (enum store_state: 1 dead, 2
-- complete, 3 failed, 4 exception; 0 or else: failed), all members of
-- batch bid (or of none, NULL); ks says which have children: those hear
-- of it, the batch's counters move once for them all, and what became due
-- fires. A batch dropped meanwhile counts nothing. Returns 1 if it counted,
-- plus the callbacks fired.
CREATE FUNCTION dsjob.ended_many(bid text, hs text[], os int2[], ks boolean[]) RETURNS integer
 LANGUAGE plpgsql AS $$
DECLARE
 b dsjob.batches; i integer; nd int8 := 0; nx int8 := 0; nf int8 := 0; fh text[] := '{}';
BEGIN
 FOR i IN 1..coalesce(array_length(hs, 1), 0) LOOP
  IF ks[i] THEN
   PERFORM dsjob.deps_ended(hs[i], os[i]);
  END IF;
  IF os[i] = 2 THEN
   nd := nd + 1;
  ELSE
   IF os[i] = 1 THEN
    nx := nx + 1;
   ELSE
    nf := nf + 1;
   END IF;
   fh := fh || hs[i];
  END IF;
 END LOOP;
 IF bid IS NULL THEN
  RETURN 0;
 END IF;
 UPDATE dsjob.batches SET done = done + nd, dead = dead + nx, failed = failed + nf,
  failed_handles = failed_handles || fh[1:greatest(0, 1000 - cardinality(failed_handles))]
 WHERE id = bid RETURNING * INTO b;
 IF NOT FOUND THEN
  RETURN 0;
 END IF;
 IF b.closed AND b.done + b.failed + b.dead >= b.total THEN
  RETURN 1 + dsjob.batch_fire(bid);
 END IF;
 RETURN 1;
END $$;
-- One live job h ended with outcome, as dsjob.ended_many.
CREATE FUNCTION dsjob.ended(h text, bid text, outcome integer) RETURNS integer
 LANGUAGE plpgsql AS $$
BEGIN
 RETURN dsjob.ended_many(bid, ARRAY[h], ARRAY[outcome::int2], ARRAY[true]);
END $$;
-- A rewrite that ends a live member or parent: counted, and the row is
-- no longer either, so that a dead job retried by hand is not counted
-- again when it ends (as on one server).
CREATE FUNCTION dsjob.jobs_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
 PERFORM dsjob.ended(OLD.handle, OLD.batch, NEW.state);
 NEW.batch := NULL;
 NEW.kids := false;
 RETURN NEW;
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
CREATE TRIGGER jobs_ended BEFORE UPDATE OF state ON dsjob.jobs FOR EACH ROW
 WHEN (OLD.state = 0 AND NEW.state <> 0 AND (OLD.batch IS NOT NULL OR OLD.kids))
 EXECUTE PROCEDURE dsjob.jobs_ended();
-- The edges of children just added (in the transaction of their INSERT):
-- cs[i] waits for ps[i] with policy pol[i]. A parent live in the table
-- (any server's) is waited for, and its row marked (kids); one kept
-- (--keep-results) counts by its outcome; one not there is unknown. A
-- child with an unknown parent, or a failed one and a policy other than
-- run, is deleted and returned with why (its add is refused, as on a
-- server alone); one still waiting is held. A child with no row (its add
-- coalesced onto a live job) waits for nothing.
CREATE FUNCTION dsjob.deps_add(cs text[], ps text[], pol int2[])
 RETURNS TABLE (child text, why text) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
 i integer; c text; p text; st smallint; n integer := coalesce(array_length(cs, 1), 0);
 refused text := NULL; waits boolean := false; names text[] := ARRAY['fail', 'cancel', 'run'];
BEGIN
 FOR i IN 1..n LOOP
  c := cs[i];
  p := ps[i];
  IF refused IS NULL AND EXISTS (SELECT 1 FROM dsjob.jobs j WHERE j.handle = c AND j.state = 0)
  THEN
   UPDATE dsjob.jobs j SET kids = true WHERE j.handle = p AND j.state = 0;
   IF FOUND THEN
    INSERT INTO dsjob.deps (child, parent, policy) VALUES (c, p, pol[i])
     ON CONFLICT DO NOTHING;
    waits := true;
   ELSE
    SELECT j.state INTO st FROM dsjob.jobs j WHERE j.handle = p;
    IF NOT FOUND THEN
     refused := 'after: no job ' || p || ' (not live, and no outcome kept: see --keep-results)';
    ELSIF st <> 2 AND pol[i] <> 2 THEN
     refused := 'after: job ' || p || ' failed (after-fail=' || names[pol[i] + 1] || ')';
    END IF;
   END IF;
  END IF;
  -- The child's last edge: refuse it, hold it, or leave it to run.
  IF i = n OR cs[i + 1] <> c THEN
   IF refused IS NOT NULL THEN
    DELETE FROM dsjob.deps d WHERE d.child = c;
    DELETE FROM dsjob.jobs j WHERE j.handle = c;
    child := c;
    why := refused;
    RETURN NEXT;
   ELSIF waits THEN
    UPDATE dsjob.jobs j SET owner = '(held)', lease_until = '9999-12-31'
    WHERE j.handle = c AND j.state = 0;
   END IF;
   refused := NULL;
   waits := false;
  END IF;
 END LOOP;
END $$;
UPDATE dsjob.meta SET value = '4' WHERE key = 'schema_version';
