-- The shared token buckets of per-key rates (key-rate) across servers
-- (key_take.sql), one row per function and key that drew tokens and is
-- not full again (a full bucket is no row), made if missing at every
-- start, outside the schema version as dsjob.flow_bucket is. Written only
-- under the lock of the function's dsjob.flow_bucket row. tokens is what
-- the bucket held at at.
CREATE TABLE IF NOT EXISTS dsjob.flow_key_bucket (func text NOT NULL, k bytea NOT NULL,
 tokens float8 NOT NULL, at timestamptz NOT NULL, PRIMARY KEY (func, k))
