-- Every function's settings, for replay_funcs.
SELECT name, retries, backoff_base_ms, backoff_max_ms FROM dsjob.funcs
