-- Before a take of functions with limits, in the batch's transaction:
-- lock each one's row of dsjob.flow_bucket (held to the commit, so the
-- takes of limited functions go one server at a time, each seeing the
-- last one's leases) and take up to the wanted tokens from its bucket.
-- An INSERT ... ON CONFLICT DO UPDATE works on the row's latest version,
-- so two servers never take the same token. $1 the functions, $2 how
-- many jobs of each are wanted, $3 rate (0: none: every job granted),
-- $4 its period in ms, $5 its burst (0: the rate). clock_timestamp(), not
-- now(): a transaction that waited for the lock fills the bucket up to
-- when it got it. Returns each function, its tokens granted, the tokens
-- left, the rate and the period.
INSERT INTO dsjob.flow_bucket AS b (name, tokens, at, rate, period_ms, cap, want, granted)
SELECT n, c - least(w, c), clock_timestamp(), r, p, c, w, CASE WHEN r = 0 THEN w ELSE least(w, c) END
FROM (SELECT n, w, r, p, CASE WHEN bu > 0 THEN bu ELSE r END AS c
 FROM unnest($1::text[], $2::int4[], $3::int4[], $4::int4[], $5::int4[]) AS t(n, w, r, p, bu)) s
ORDER BY n
ON CONFLICT (name) DO UPDATE SET
 tokens = CASE WHEN excluded.rate = 0 THEN 0 ELSE
  (CASE WHEN b.rate = 0 THEN excluded.cap ELSE least(excluded.cap::float8, b.tokens +
   greatest(extract(epoch FROM clock_timestamp() - b.at), 0) * 1000 * excluded.rate /
   excluded.period_ms) END)
  - least(excluded.want, floor(CASE WHEN b.rate = 0 THEN excluded.cap ELSE
   least(excluded.cap::float8, b.tokens + greatest(extract(epoch FROM clock_timestamp() - b.at), 0)
   * 1000 * excluded.rate / excluded.period_ms) END)) END,
 granted = CASE WHEN excluded.rate = 0 THEN excluded.want ELSE
  greatest(least(excluded.want, floor(CASE WHEN b.rate = 0 THEN excluded.cap ELSE
   least(excluded.cap::float8, b.tokens + greatest(extract(epoch FROM clock_timestamp() - b.at), 0)
   * 1000 * excluded.rate / excluded.period_ms) END)), 0)::int4 END,
 at = clock_timestamp(), rate = excluded.rate, period_ms = excluded.period_ms,
 cap = excluded.cap, want = excluded.want
RETURNING name, granted, tokens, rate, period_ms
