-- A function's settings: $1 its name, $2 retries, $3 backoff base, $4 backoff max (ms).
INSERT INTO dsjob.funcs VALUES ($1::text, $2::int8, $3::int8, $4::int8)
ON CONFLICT (name) DO UPDATE SET retries = excluded.retries,
 backoff_base_ms = excluded.backoff_base_ms, backoff_max_ms = excluded.backoff_max_ms
