-- Every function's settings, for replay_funcs: its row in dsjob.funcs,
-- dsjob.flow (flow control), or both.
SELECT name, max(r), max(b), max(m), max(w) FROM (
 SELECT name, retries AS r, backoff_base_ms AS b, backoff_max_ms AS m, '' AS w FROM dsjob.funcs
 UNION ALL SELECT name, 0, 0, 0, settings FROM dsjob.flow) s GROUP BY name
