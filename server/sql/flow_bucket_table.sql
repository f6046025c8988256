-- The shared token buckets and concurrency locks of flow control across
-- servers (store_postgres.c's flow_before), one row a function with a
-- limit, made if missing at every start, outside the schema version as
-- dsjob.flow is. The row is the lock a take with limits holds until its
-- commit; tokens is what the bucket held at at; rate, period_ms and cap
-- are the last take's settings, want and granted its ask and its answer.
CREATE TABLE IF NOT EXISTS dsjob.flow_bucket (name text PRIMARY KEY,
 tokens float8 NOT NULL, at timestamptz NOT NULL, rate int4 NOT NULL,
 period_ms int4 NOT NULL, cap int4 NOT NULL, want int4 NOT NULL, granted int4 NOT NULL)
